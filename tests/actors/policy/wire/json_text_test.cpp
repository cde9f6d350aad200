#include "actors/policy/wire/json_text.hpp"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <cstdio>
#include <limits>
#include <random>
#include <string>

namespace tether {
namespace {

std::string quoted(std::string_view text) {
  std::string out;
  append_json_string(out, text);
  return out;
}

std::string decimal_3(double v) {
  std::string out;
  append_decimal_3(out, v);
  return out;
}

std::string printf_3(double v) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

TEST(JsonTextTest, StringsAreEscapedAsBoostJsonDoes) {
  const std::string every_control = [] {
    std::string s;
    for (int c = 0; c < 0x20; ++c) s += static_cast<char>(c);
    return s;
  }();
  const std::string_view texts[] = {
      "",
      "plain",
      R"(quote " backslash \ slash /)",
      every_control,
      "del \x7f",
      "utf-8: caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80",
  };
  for (const auto text : texts) {
    EXPECT_EQ(quoted(text), boost::json::serialize(boost::json::value(text))) << text;
    EXPECT_EQ(boost::json::parse(quoted(text)).as_string(), text);
  }
}

// The writer reads eight characters at a time: every byte value at every place of the words and
// of the tail, beside neighbours next to the bytes that need an escape (borrows between bytes).
TEST(JsonTextTest, EveryCharacterIsEscapedWhereverItIs) {
  for (std::size_t size = 1; size <= 20; ++size) {
    for (std::size_t at = 0; at < size; ++at) {
      for (int c = 0; c < 256; ++c) {
        for (const char fill :
             {'a', '\x00', '\x1f', '\x20', '\x21', '\x23', '\x5b', '\x5d', '\xff'}) {
          std::string text(size, fill);
          text[at] = static_cast<char>(c);
          ASSERT_EQ(tether::quoted(text), boost::json::serialize(boost::json::value(text)))
              << "size " << size << " at " << at << " byte " << c << " fill " << int(fill);
        }
      }
    }
  }
}

TEST(JsonTextTest, DecimalsHaveThreePlacesRoundedAsPrintfRounds) {
  for (const double v :
       {0.0, -0.0, 1.0, 1.5, 0.0005, 0.0015, 1.0005, 2.675, 12.3456, -7.25, 199.99949999, 999.9995,
        0.9995, 1e9 + 0.123, 123456789.0625, 999999999.9994, 999999999.9996}) {
    EXPECT_EQ(decimal_3(v), printf_3(v)) << v;
  }
  std::mt19937_64 rng{42};
  std::uniform_real_distribution<double> ms{0.0, 600000.0};
  for (int i = 0; i < 20000; ++i) {
    const double v = ms(rng);
    ASSERT_EQ(decimal_3(v), printf_3(v)) << v;
  }
  // Durations as tether computes them (ns / 1e6), including values a hair from a tie.
  std::uniform_int_distribution<long long> ns{0, 999'999'999'999LL};
  for (int i = 0; i < 20000; ++i) {
    const double v = static_cast<double>(ns(rng)) / 1e6;
    ASSERT_EQ(decimal_3(v), printf_3(v)) << v;
  }
  for (long long n = 0; n < 5000; ++n) {  // x.xxx5 exactly in decimal, a tie only in decimal
    const double v = static_cast<double>(n * 1000 + 500) / 1e6;
    ASSERT_EQ(decimal_3(v), printf_3(v)) << v;
  }
}

TEST(JsonTextTest, AValueTooLongForFixedNotationStillWritesANumber) {
  const auto text = decimal_3(1e300);
  EXPECT_FALSE(text.empty());
  EXPECT_DOUBLE_EQ(std::stod(text), 1e300);
}

TEST(JsonTextTest, IntegersInDecimal) {
  for (const long long v : {0LL, 7LL, -42LL, 504LL, std::numeric_limits<long long>::max(),
                            std::numeric_limits<long long>::min()}) {
    std::string out;
    append_integer(out, v);
    EXPECT_EQ(out, std::to_string(v));
  }
}

}  // namespace
}  // namespace tether
