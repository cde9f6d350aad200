#include "actors/policy/admission/rate_book.hpp"

#include <gtest/gtest.h>

namespace tether {
namespace {

constexpr std::int64_t s = 1'000'000'000;  // one second in ns

TEST(RateBookTest, TheRequestPastRpmWithinTheMinuteIsRefusedUntilTheFirstLeavesTheWindow) {
  rate_book b({{5, 0}});
  const std::int64_t t0 = 1000 * s + s / 2;
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(b.admit(0, 10, t0 + i * s).admitted) << i;
  auto sixth = b.admit(0, 10, t0 + 10 * s);
  EXPECT_FALSE(sixth.admitted);
  EXPECT_FALSE(sixth.never);
  EXPECT_NE(sixth.reason.find("rpm (5"), std::string::npos) << sixth.reason;
  // The first was charged in second 1000: it leaves at second 1060, 49.5 s after t0 + 10 s.
  EXPECT_EQ(sixth.retry_after_ms, 49'500);
  EXPECT_EQ(b.requests_in_window(0, t0 + 10 * s), 5u);
  EXPECT_FALSE(b.admit(0, 10, 1059 * s + s - 1).admitted);
  EXPECT_TRUE(b.admit(0, 10, 1060 * s).admitted);
  EXPECT_EQ(b.requests_in_window(0, 1060 * s), 5u);
}

TEST(RateBookTest, TokensAreChargedByEstimateAndCorrectedByWhatWasUsed) {
  rate_book b({{0, 1000}});
  auto first = b.admit(0, 600, 5 * s);
  ASSERT_TRUE(first.admitted);
  auto second = b.admit(0, 600, 6 * s);  // 1200 > 1000
  EXPECT_FALSE(second.admitted);
  EXPECT_NE(second.reason.find("tpm (1000"), std::string::npos) << second.reason;
  EXPECT_EQ(second.retry_after_ms, 59'000);
  // The first used only 150 of its 600: the second fits now.
  b.correct(0, first.charged_second, 600, 150, 7 * s);
  EXPECT_EQ(b.tokens_in_window(0, 7 * s), 150u);
  EXPECT_TRUE(b.admit(0, 600, 7 * s).admitted);
  EXPECT_EQ(b.tokens_in_window(0, 7 * s), 750u);
  // A correction upwards counts too: usage beyond the estimate is charged.
  auto third = b.admit(0, 100, 8 * s);
  ASSERT_TRUE(third.admitted);
  b.correct(0, third.charged_second, 100, 250, 9 * s);
  EXPECT_EQ(b.tokens_in_window(0, 9 * s), 1000u);
  EXPECT_FALSE(b.admit(0, 1, 9 * s).admitted);
  // After the window, a correction has nothing to correct.
  b.correct(0, first.charged_second, 150, 900, 100 * s);
  EXPECT_EQ(b.tokens_in_window(0, 100 * s), 0u);
}

TEST(RateBookTest, ARequestHeavierThanTheWholeTpmCanNeverFit) {
  rate_book b({{0, 1000}});
  auto v = b.admit(0, 1001, 0);
  EXPECT_FALSE(v.admitted);
  EXPECT_TRUE(v.never);
  EXPECT_EQ(b.tokens_in_window(0, 0), 0u);
}

TEST(RateBookTest, KeysAreCountedApartAndUnlimitedKeysAreNotCounted) {
  rate_book b({{1, 0}, {0, 0}, {2, 0}});
  EXPECT_TRUE(b.admit(0, 1, 0).admitted);
  EXPECT_FALSE(b.admit(0, 1, 0).admitted);
  EXPECT_TRUE(b.admit(2, 1, 0).admitted);  // key 2 has its own count
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(b.admit(1, 1, 0).admitted);
  EXPECT_TRUE(b.admit(-1, 1, 0).admitted);
  EXPECT_TRUE(b.admit(7, 1, 0).admitted);  // beyond the list
  EXPECT_FALSE(b.limited(1));
  EXPECT_TRUE(b.limited(2));
}

TEST(RateBookTest, AReloadAppliesNewLimitsToWhatIsAlreadyCharged) {
  rate_book b({{3, 0}});
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(b.admit(0, 1, 0).admitted);
  b.set_limits({{2, 0}, {1, 0}});
  EXPECT_FALSE(b.admit(0, 1, s).admitted);
  EXPECT_TRUE(b.admit(1, 1, s).admitted);  // a key added by the reload
  b.set_limits({{10, 0}, {1, 0}});
  EXPECT_TRUE(b.admit(0, 1, 2 * s).admitted);
}

// Both limits: the wait is until both fit.
TEST(RateBookTest, TheWaitIsUntilBothTheRequestAndTheTokenLimitFit) {
  rate_book b({{2, 100}});
  ASSERT_TRUE(b.admit(0, 90, 0).admitted);      // second 0
  ASSERT_TRUE(b.admit(0, 5, 30 * s).admitted);  // second 30
  auto v = b.admit(0, 50, 40 * s);              // both the rpm and the tpm are past
  EXPECT_FALSE(v.admitted);
  EXPECT_EQ(v.retry_after_ms, 20'000);  // second 60: the 90 and one request leave
}

}  // namespace
}  // namespace tether
