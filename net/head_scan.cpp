#include "net/head_scan.hpp"

#include <algorithm>
#include <array>

#include "net/header_text.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace tether::net {

namespace {

// For a name's characters: the lower-case character for a tchar, 0 for anything else.
constexpr std::array<char, 256> make_name_chars() {
  std::array<char, 256> t{};
  for (std::size_t c = 0; c < t.size(); ++c) {
    if (tchar_table[c]) t[c] = ascii_lower(static_cast<char>(c));
  }
  return t;
}

constexpr auto name_chars = make_name_chars();

// A control character: below SP, or DEL. Of these a field value may hold only HTAB, and a line
// ends at the CR of a CRLF.
constexpr bool is_control(unsigned char c) {
  return c < 0x20 || c == 0x7f;
}

// The first control character at or after `p` (before `end`), or `end`; with `or_colon`, the
// first colon too. Sixteen bytes at a time where SSE2 is, as on every x86-64: a head is mostly
// ordinary text.
template <bool or_colon>
const char* find_stop(const char* p, const char* end) {
#if defined(__SSE2__)
  const __m128i below_space = _mm_set1_epi8(0x1f);
  const __m128i del = _mm_set1_epi8(0x7f);
  const __m128i colon = _mm_set1_epi8(':');
  for (; end - p >= 16; p += 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    // x <= 0x1f unsigned: min(x, 0x1f) == x.
    __m128i hit =
        _mm_or_si128(_mm_cmpeq_epi8(_mm_min_epu8(x, below_space), x), _mm_cmpeq_epi8(x, del));
    if constexpr (or_colon) hit = _mm_or_si128(hit, _mm_cmpeq_epi8(x, colon));
    const int mask = _mm_movemask_epi8(hit);
    if (mask != 0) return p + __builtin_ctz(static_cast<unsigned>(mask));
  }
#endif
  for (; p < end; ++p) {
    if (is_control(static_cast<unsigned char>(*p)) || (or_colon && *p == ':')) return p;
  }
  return end;
}

constexpr bool is_ows(char c) {
  return c == ' ' || c == '\t';
}

}  // namespace

bool frames_message(std::string_view n) noexcept {
  switch (n.size()) {
    case 7:
      return n == "upgrade";
    case 10:
      return n == "connection";
    case 14:
      return n == "content-length";
    case 16:
      return n == "proxy-connection";
    case 17:
      return n == "transfer-encoding";
    default:
      return false;
  }
}

// One pass, line by line: each line runs to its first control character, which must be the CR
// of a CRLF (an HTAB inside a value is skipped over). The empty line ends the head.
// Whether Beast, given this start line followed by no more than a CRLF and the framing fields,
// decides on it as it would with the whole message after it: it reads a version's eight bytes
// (and a status's three digits and SP) before it looks at them, and says "need more" where they
// are not there yet. A start line of the shape it expects leaves no such doubt; any other is
// Beast's to parse whole.
namespace {
bool start_line_shaped(std::string_view line, bool request) {
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (request) {
    // method SP target SP HTTP/d.d
    if (line.size() < 12) return false;
    const auto v = line.substr(line.size() - 9);
    return v.starts_with(" HTTP/") && digit(v[6]) && v[7] == '.' && digit(v[8]);
  }
  // HTTP/d.d SP ddd SP reason
  return line.size() >= 13 && line.starts_with("HTTP/") && digit(line[5]) && line[6] == '.' &&
         digit(line[7]) && line[8] == ' ' && digit(line[9]) && digit(line[10]) && digit(line[11]) &&
         line[12] == ' ';
}
}  // namespace

head_scan scan_head(std::string_view in, std::size_t limit, bool request, scanned_head& out) {
  const char* const begin = in.data();
  // Past `limit`, the head is too long, which Beast reports; short of it, it may still come.
  const char* const end = begin + std::min(in.size(), limit);
  const auto more = [&] { return in.size() >= limit ? head_scan::unusual : head_scan::need_more; };

  const char* p = find_stop<false>(begin, end);
  if (p == end) return more();
  // An empty start line (a stray CRLF before a request) or one with another control character:
  // Beast's.
  if (p == begin || *p != '\r') return head_scan::unusual;
  if (p + 1 == end) return more();
  if (p[1] != '\n') return head_scan::unusual;
  if (!start_line_shaped({begin, static_cast<std::size_t>(p - begin)}, request)) {
    return head_scan::unusual;
  }
  out.fields.clear();
  out.fields.reserve(16);
  out.for_beast.assign(begin, p);
  out.for_beast += "\r\n";
  p += 2;
  for (;;) {
    if (p == end) return more();
    if (*p == '\r') {  // the empty line
      if (p + 1 == end) return more();
      if (p[1] != '\n') return head_scan::unusual;
      p += 2;
      break;
    }
    const char* const line = p;
    // The name runs to the line's first colon; an empty one (an obs-fold's leading space, too)
    // or a character that is not a tchar is Beast's. It is lower-cased as it is checked.
    const char* const colon = find_stop<true>(p, end);
    if (colon == end) return more();
    if (colon == p || *colon != ':') return head_scan::unusual;
    const auto length = static_cast<std::size_t>(colon - p);
    std::string name(length, '\0');
    // Without a branch per character: a character that is not a tchar becomes 0, seen once at
    // the end.
    char* const to = name.data();
    unsigned char any_zero = 0;
    for (std::size_t i = 0; i < length; ++i) {
      const char c = name_chars[static_cast<unsigned char>(p[i])];
      to[i] = c;
      any_zero |= static_cast<unsigned char>(c == 0);
    }
    if (any_zero != 0) return head_scan::unusual;
    const char* value = colon + 1;
    // The value runs to the line's first control character past an HTAB, the CR of its CRLF.
    const char* eol = find_stop<false>(value, end);
    while (eol != end && *eol == '\t') eol = find_stop<false>(eol + 1, end);
    if (eol == end || eol + 1 == end) return more();
    if (*eol != '\r' || eol[1] != '\n') return head_scan::unusual;
    const char* value_end = eol;
    while (value != value_end && is_ows(*value)) ++value;
    while (value_end != value && is_ows(value_end[-1])) --value_end;
    if (frames_message(name)) {
      out.for_beast.append(line, eol);
      out.for_beast += "\r\n";
    }
    out.fields.push_back({std::move(name), std::string(value, value_end)});
    p = eol + 2;
  }
  out.for_beast += "\r\n";
  out.size = static_cast<std::size_t>(p - begin);
  return head_scan::scanned;
}

}  // namespace tether::net
