#include "net/header_text.hpp"

#include <gtest/gtest.h>

#include <cctype>
#include <string>

namespace tether::net {
namespace {

TEST(HeaderTextTest, LowerCaseTouchesOnlyAsciiLetters) {
  EXPECT_EQ(to_lower_ascii("Content-Type"), "content-type");
  EXPECT_EQ(to_lower_ascii("X-1_~"), "x-1_~");
  EXPECT_EQ(to_lower_ascii("\xC3\x84"), "\xC3\x84");  // UTF-8 bytes pass through unchanged
  for (int c = 0; c < 256; ++c) {
    const char ch = static_cast<char>(c);
    const char expected = c < 128 ? static_cast<char>(std::tolower(c)) : ch;
    EXPECT_EQ(ascii_lower(ch), expected) << c;
  }
}

// The lowering goes eight bytes at a time with a byte-by-byte tail: every byte value, in every
// position of a word and of the tail, next to neighbours that would carry into it.
TEST(HeaderTextTest, LowerCaseOfEveryByteInEveryPosition) {
  for (std::size_t size : {1U, 7U, 8U, 9U, 16U, 21U}) {
    for (std::size_t at = 0; at < size; ++at) {
      for (int c = 0; c < 256; ++c) {
        for (char fill : {'\x00', '\x7f', '\xff', 'Z', 'A', '@', '['}) {
          std::string in(size, fill);
          in[at] = static_cast<char>(c);
          std::string expected = in;
          for (auto& e : expected) e = ascii_lower(e);
          ASSERT_EQ(to_lower_ascii(in), expected)
              << "size " << size << " at " << at << " byte " << c << " fill " << int(fill);
        }
      }
    }
  }
}

TEST(HeaderTextTest, CaseInsensitiveEquality) {
  EXPECT_TRUE(iequals_ascii("Transfer-Encoding", "transfer-encoding"));
  EXPECT_TRUE(iequals_ascii("", ""));
  EXPECT_FALSE(iequals_ascii("host", "hosts"));
  EXPECT_FALSE(iequals_ascii("te", "tf"));
  EXPECT_FALSE(iequals_ascii("a[", "A{"));  // '[' and '{' are 32 apart but not letters
}

TEST(HeaderTextTest, TokensAreTheRfcCharacterSet) {
  EXPECT_TRUE(is_token("x-request-id"));
  EXPECT_TRUE(is_token("!#$%&'*+-.^_`|~09azAZ"));
  EXPECT_FALSE(is_token(""));
  for (const char* bad :
       {"a b", "a:b", "a\tb", "a\"b", "a(b", "a,b", "a/b", "a@b", "a{b", "a\x7f", "\xC3\x84"})
    EXPECT_FALSE(is_token(bad)) << bad;
  int tokens = 0;
  for (int c = 0; c < 256; ++c) tokens += is_token(std::string(1, static_cast<char>(c)));
  EXPECT_EQ(tokens, 10 + 26 + 26 + 15);
}

TEST(HeaderTextTest, LineBreaksAreCrLfAndNul) {
  EXPECT_FALSE(has_line_break("Bearer abc; q=1\t"));
  EXPECT_TRUE(has_line_break("a\rb"));
  EXPECT_TRUE(has_line_break("a\nb"));
  EXPECT_TRUE(has_line_break(std::string("a\0b", 3)));
  EXPECT_FALSE(has_line_break(""));
}

// The check reads sixteen bytes at a time (eight without SSE2): every byte value at every place
// of the blocks and of the tail, beside neighbours that differ from CR, LF and NUL by one (borrows
// between bytes in a word).
TEST(HeaderTextTest, LineBreaksAreFoundWhereverTheyAre) {
  int found = 0;
  for (std::size_t size = 1; size <= 40; ++size) {
    for (std::size_t at = 0; at < size; ++at) {
      for (int c = 0; c < 256; ++c) {
        for (const char fill : {'a', '\x01', '\x0e', '\x0b', '\x80', '\xff'}) {
          std::string s(size, fill);
          s[at] = static_cast<char>(c);
          const bool expected = c == '\r' || c == '\n' || c == 0;
          ASSERT_EQ(has_line_break(s), expected)
              << "size " << size << " at " << at << " byte " << c;
          found += expected;
        }
      }
    }
  }
  EXPECT_EQ(found, 3 * 6 * (40 * 41 / 2));
}

}  // namespace
}  // namespace tether::net
