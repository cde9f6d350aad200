#include "actors/policy/admission/token_weight.hpp"

#include <gtest/gtest.h>

#include <limits>

namespace tether {
namespace {

TEST(TokenWeightTest, ThePromptIsEstimatedFromTheBodySizeAndTheOutputFromItsLimit) {
  EXPECT_EQ(estimate_prompt_tokens(0), 0u);
  EXPECT_EQ(estimate_prompt_tokens(403), 100u);
  EXPECT_EQ(token_weight(100, 600, 1024), 700u);
  EXPECT_EQ(token_weight(100, std::nullopt, 1024), 1124u);  // the model's default
  EXPECT_EQ(token_weight(100, 0, 1024), 100u);              // a limit of 0 is a limit
}

TEST(TokenWeightTest, AnAbsurdLimitSaturatesInsteadOfWrappingToALightWeight) {
  const auto most = std::numeric_limits<std::uint64_t>::max();
  EXPECT_EQ(token_weight(10, most, 1024), most);
  EXPECT_EQ(token_weight(most, 1, 1024), most);
}

}  // namespace
}  // namespace tether
