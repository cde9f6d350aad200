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

}  // namespace
}  // namespace tether::net
