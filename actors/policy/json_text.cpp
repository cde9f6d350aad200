#include "actors/policy/json_text.hpp"

#include <charconv>
#include <cmath>
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
  // The usual value (a duration in ms) in integer arithmetic: v × 1000 is off the exact product
  // by at most half an ulp (6.1e-5 below 1e12), so away from a tie its rounding is the exact
  // value's — the one printf and to_chars give. Near a tie, and outside that range, to_chars.
  if (!std::signbit(v) && v < 1e9) {
    const double scaled = v * 1000.0;
    const double whole = std::floor(scaled);
    const double frac = scaled - whole;
    if (std::fabs(frac - 0.5) > 1e-3) {
      const auto thousandths = static_cast<long long>(whole) + (frac > 0.5 ? 1 : 0);
      append_integer(out, thousandths / 1000);
      const auto rest = static_cast<int>(thousandths % 1000);
      out += '.';
      out += static_cast<char>('0' + rest / 100);
      out += static_cast<char>('0' + rest / 10 % 10);
      out += static_cast<char>('0' + rest % 10);
      return;
    }
  }
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
