#include "actors/policy/json_text.hpp"

#include <charconv>
#include <cstdio>
#include <system_error>

namespace tether {

namespace {

bool needs_escape(char c) {
  return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20;
}

void append_escape(std::string& out, char c) {
  static constexpr char hex[] = "0123456789abcdef";
  switch (c) {
    case '"':
      out += "\\\"";
      return;
    case '\\':
      out += "\\\\";
      return;
    case '\b':
      out += "\\b";
      return;
    case '\f':
      out += "\\f";
      return;
    case '\n':
      out += "\\n";
      return;
    case '\r':
      out += "\\r";
      return;
    case '\t':
      out += "\\t";
      return;
    default:
      out += "\\u00";
      out += hex[(static_cast<unsigned char>(c) >> 4) & 0xf];
      out += hex[static_cast<unsigned char>(c) & 0xf];
  }
}

}  // namespace

// Runs of characters that need no escape (nearly all of them) are appended whole.
void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  std::size_t run = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (!needs_escape(text[i])) continue;
    out.append(text, run, i - run);
    append_escape(out, text[i]);
    run = i + 1;
  }
  out.append(text, run, text.size() - run);
  out += '"';
}

void append_decimal_3(std::string& out, double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed, 3);
  if (r.ec == std::errc{}) {
    out.append(buf, r.ptr);
    return;
  }
  // Only a value too long for the buffer (beyond 1e60) gets here.
  const int n = std::snprintf(buf, sizeof buf, "%.3e", v);
  if (n > 0) out.append(buf, static_cast<std::size_t>(n));
}

void append_integer(std::string& out, long long v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

}  // namespace tether
