// Values written as TOML by hand: here, numbers (the rest is checked by the loader's round trips).
#include "config/toml_text.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace tether::config {
namespace {

TEST(NumberTextTest, AWholeNumberIsWrittenWithoutAFractionAndAFractionAsShortAsReadsBack) {
  EXPECT_EQ(number_text(0.0), "0");
  EXPECT_EQ(number_text(2.0), "2");
  EXPECT_EQ(number_text(1000000.0), "1000000");
  EXPECT_EQ(number_text(1.25), "1.25");
  EXPECT_EQ(number_text(0.1), "0.1");
  EXPECT_EQ(number_text(0.075), "0.075");
  for (const double v : {0.1, 1.0 / 3, 1e-7, 123456.789, 999999.999999, 1e9 - 0.5}) {
    const auto text = number_text(v);
    EXPECT_EQ(std::strtod(text.c_str(), nullptr), v) << text;
  }
}

}  // namespace
}  // namespace tether::config
