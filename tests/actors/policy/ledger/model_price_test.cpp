#include "actors/policy/ledger/model_price.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace tether::ledger {
namespace {

TEST(ModelPriceTest, EachKindOfTokenCostsItsPricePerMillion) {
  const model_price price{
      .input_per_mtok = 3.0, .output_per_mtok = 15.0, .cached_input_per_mtok = 0.3};
  // 1M prompt tokens of which 400k cached, 100k completion:
  // 600k × $3/M + 400k × $0.3/M + 100k × $15/M = 1.8 + 0.12 + 1.5 = $3.42.
  const usage_record r{.prompt = 1'000'000, .completion = 100'000, .cached = 400'000};
  EXPECT_EQ(spend_of(r, price), 3'420'000'000u);
  // One token at $0.075/M is 75 billionths of a dollar.
  EXPECT_EQ(spend_of(usage_record{.prompt = 1}, model_price{.input_per_mtok = 0.075}), 75u);
}

TEST(ModelPriceTest, CachedTokensCostTheInputPriceWhenNoCachedPriceIsSet) {
  const model_price price{.input_per_mtok = 2.0, .output_per_mtok = 8.0};
  const usage_record r{.prompt = 1000, .completion = 10, .cached = 900};
  EXPECT_EQ(spend_of(r, price), 1000u * 2000u + 10u * 8000u);
}

TEST(ModelPriceTest, AnUnpricedModelCostsNothingAndWasteIsNeverCharged) {
  const usage_record r{.prompt = 1000, .completion = 10, .cached = 900, .waste = 5000};
  EXPECT_EQ(spend_of(r, model_price{}), 0u);
  EXPECT_FALSE(model_price{}.priced());
  EXPECT_TRUE(model_price{.output_per_mtok = 1.0}.priced());
  EXPECT_EQ(spend_of(r, model_price{.output_per_mtok = 1.0}), 10'000u);
}

TEST(ModelPriceTest, ACachedCountAboveThePromptIsCappedAtThePrompt) {
  const model_price price{.input_per_mtok = 1.0, .cached_input_per_mtok = 0.0};
  EXPECT_EQ(spend_of(usage_record{.prompt = 10, .cached = 50}, price), 0u);
}

TEST(ModelPriceTest, DollarsBecomeBillionthsRoundedAndNonsenseCostsNothing) {
  EXPECT_EQ(usd_to_nanousd(1.5), 1'500'000'000u);
  EXPECT_EQ(usd_to_nanousd(0.0000000026), 3u);
  EXPECT_EQ(usd_to_nanousd(-1.0), 0u);
  EXPECT_EQ(usd_to_nanousd(std::nan("")), 0u);
  EXPECT_EQ(usd_to_nanousd(1e30), std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(spend_of(usage_record{.prompt = 1}, model_price{.input_per_mtok = -3.0}), 0u);
  EXPECT_EQ(spend_of(usage_record{.prompt = std::numeric_limits<std::uint64_t>::max()},
                     model_price{.input_per_mtok = 1e6}),
            std::numeric_limits<std::uint64_t>::max());
}

}  // namespace
}  // namespace tether::ledger
