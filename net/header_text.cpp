#include "net/header_text.hpp"

#include <array>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace tether::net {

// Eight bytes at a time (every header name of every request and response passes here). Within a
// byte of seven bits, adding 0x3f sets its high bit from 'A' up and adding 0x25 from past 'Z'
// on, without carrying into the next byte; bytes with the high bit already set are left alone.
std::string to_lower_ascii(std::string_view s) {
  constexpr std::uint64_t sevens = 0x7f7f7f7f7f7f7f7fULL;
  constexpr std::uint64_t highs = 0x8080808080808080ULL;
  std::string out(s);
  char* p = out.data();
  std::size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    std::uint64_t word;
    std::memcpy(&word, p + i, 8);
    const std::uint64_t low7 = word & sevens;
    const std::uint64_t from_a = low7 + 0x3f3f3f3f3f3f3f3fULL;
    const std::uint64_t past_z = low7 + 0x2525252525252525ULL;
    const std::uint64_t upper = from_a & ~past_z & ~word & highs;
    word |= upper >> 2;
    std::memcpy(p + i, &word, 8);
  }
  for (; i < out.size(); ++i) p[i] = ascii_lower(p[i]);
  return out;
}

bool iequals_ascii(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
  return true;
}

bool is_token(std::string_view s) noexcept {
  if (s.empty()) return false;
  for (char c : s)
    if (!tchar_table[static_cast<unsigned char>(c)]) return false;
  return true;
}

// Every header value of every request and response passes here: a byte at a time was a visible
// cost per request. Sixteen bytes at a time where SSE2 is there
// (every x86-64), else eight in a word; the last block overlaps the one before it. In a word,
// (x − 0x01…) & ~x has a byte's high bit set where x has a zero byte, or above one; so the word
// has a zero byte exactly when the result's high bits are not all clear.
bool has_line_break(std::string_view s) noexcept {
#if defined(__SSE2__)
  if (s.size() >= 16) {
    const __m128i cr = _mm_set1_epi8('\r');
    const __m128i lf = _mm_set1_epi8('\n');
    const __m128i nul = _mm_setzero_si128();
    const auto breaks_in = [&](const char* at) {
      __m128i block;
      std::memcpy(&block, at, sizeof block);
      const __m128i hit =
          _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(block, cr), _mm_cmpeq_epi8(block, lf)),
                       _mm_cmpeq_epi8(block, nul));
      return _mm_movemask_epi8(hit);
    };
    for (std::size_t i = 0; i + 16 < s.size(); i += 16)
      if (breaks_in(s.data() + i) != 0) return true;
    return breaks_in(s.data() + s.size() - 16) != 0;
  }
#endif
  constexpr std::uint64_t ones = 0x0101010101010101ULL;
  constexpr std::uint64_t highs = 0x8080808080808080ULL;
  const auto breaks_in = [](const char* at) {
    std::uint64_t word;
    std::memcpy(&word, at, 8);
    const std::uint64_t cr = word ^ (ones * '\r');
    const std::uint64_t lf = word ^ (ones * '\n');
    return (((word - ones) & ~word) | ((cr - ones) & ~cr) | ((lf - ones) & ~lf)) & highs;
  };
  if (s.size() < 8) {
    for (const char c : s)
      if (c == '\r' || c == '\n' || c == '\0') return true;
    return false;
  }
  for (std::size_t i = 0; i + 8 < s.size(); i += 8)
    if (breaks_in(s.data() + i) != 0) return true;
  return breaks_in(s.data() + s.size() - 8) != 0;
}

}  // namespace tether::net
