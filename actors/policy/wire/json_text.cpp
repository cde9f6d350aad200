#include "actors/policy/wire/json_text.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <system_error>

namespace tether {

namespace {

bool needs_escape(char c) {
  return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20;
}

char* write_escape(char* out, char c) {
  static constexpr char hex[] = "0123456789abcdef";
  *out++ = '\\';
  switch (c) {
    case '"':
    case '\\':
      *out++ = c;
      return out;
    case '\b':
      *out++ = 'b';
      return out;
    case '\f':
      *out++ = 'f';
      return out;
    case '\n':
      *out++ = 'n';
      return out;
    case '\r':
      *out++ = 'r';
      return out;
    case '\t':
      *out++ = 't';
      return out;
    default:
      *out++ = 'u';
      *out++ = '0';
      *out++ = '0';
      *out++ = hex[(static_cast<unsigned char>(c) >> 4) & 0xf];
      *out++ = hex[static_cast<unsigned char>(c) & 0xf];
      return out;
  }
}

char* write_char(char* out, char c) {
  if (needs_escape(c)) return write_escape(out, c);
  *out++ = c;
  return out;
}

// Appends what `write` writes, given room for at most `max` characters.
template <class Write>
void append_written(std::string& out, std::size_t max, Write write) {
  const auto size = out.size();
  out.resize(size + max);
  char* end = write(out.data() + size);
  out.resize(static_cast<std::size_t>(end - out.data()));
}

}  // namespace

// Eight characters at a time: a word none of whose bytes needs an escape (nearly every word of
// an access line) is copied whole; the others a character at a time. A byte of x is below 0x20,
// or zero, exactly where (x − 0x20…) & ~x, or (x − 0x01…) & ~x, has its high bit set or a set
// high bit below it does: so the word needs nothing exactly when no high bit is set in any of
// the three tests.
char* write_json_string(char* out, std::string_view text) {
  constexpr std::uint64_t ones = 0x0101010101010101ULL;
  constexpr std::uint64_t highs = 0x8080808080808080ULL;
  const auto needs_escape_in = [](std::uint64_t word) {
    const std::uint64_t quote = word ^ (ones * '"');
    const std::uint64_t backslash = word ^ (ones * '\\');
    return (((word - ones * 0x20) & ~word) | ((quote - ones) & ~quote) |
            ((backslash - ones) & ~backslash)) &
           highs;
  };
  *out++ = '"';
  const char* p = text.data();
  const char* const end = p + text.size();
  for (; end - p >= 8; p += 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);
    if (needs_escape_in(word) == 0) {
      std::memcpy(out, p, 8);
      out += 8;
      continue;
    }
    for (int i = 0; i < 8; ++i) out = write_char(out, p[i]);
  }
  for (; p < end; ++p) out = write_char(out, *p);
  *out++ = '"';
  return out;
}

char* write_decimal_3(char* out, double v) {
  // The usual value (a duration in ms) in integer arithmetic: v × 1000 is off the exact product
  // by at most half an ulp (6.1e-5 below 1e12), so away from a tie its rounding is the exact
  // value's — the one printf and to_chars give. Near a tie, and outside that range, to_chars.
  if (!std::signbit(v) && v < 1e9) {
    const double scaled = v * 1000.0;
    const double whole = std::floor(scaled);
    const double frac = scaled - whole;
    if (std::fabs(frac - 0.5) > 1e-3) {
      const auto thousandths = static_cast<long long>(whole) + (frac > 0.5 ? 1 : 0);
      out = write_integer(out, thousandths / 1000);
      const auto rest = static_cast<int>(thousandths % 1000);
      *out++ = '.';
      *out++ = static_cast<char>('0' + rest / 100);
      *out++ = static_cast<char>('0' + rest / 10 % 10);
      *out++ = static_cast<char>('0' + rest % 10);
      return out;
    }
  }
  const auto r = std::to_chars(out, out + json_number_max, v, std::chars_format::fixed, 3);
  if (r.ec == std::errc{}) return r.ptr;
  // Only a value too long for the room (beyond 1e60) gets here.
  char buf[json_number_max];
  const int n = std::snprintf(buf, sizeof buf, "%.3e", v);
  return n > 0 ? std::copy(buf,
                           buf + std::min<std::size_t>(static_cast<std::size_t>(n), sizeof buf - 1),
                           out)
               : out;
}

char* write_integer(char* out, long long v) {
  return std::to_chars(out, out + json_number_max, v).ptr;
}

void append_json_string(std::string& out, std::string_view text) {
  append_written(out, json_string_max(text.size()),
                 [&](char* at) { return write_json_string(at, text); });
}

void append_decimal_3(std::string& out, double v) {
  append_written(out, json_number_max, [&](char* at) { return write_decimal_3(at, v); });
}

void append_integer(std::string& out, long long v) {
  append_written(out, json_number_max, [&](char* at) { return write_integer(at, v); });
}

}  // namespace tether
