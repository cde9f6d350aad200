#include "actors/policy/ledger/budget_check.hpp"

#include <gtest/gtest.h>

namespace tether::ledger {
namespace {

constexpr std::int64_t feb_29_2024 = 1709164800;
constexpr std::int64_t mar_1_2024 = 1709251200;
constexpr std::int64_t noon = feb_29_2024 + 12 * 3600;

TEST(BudgetCheckTest, AKeyWithoutBudgetsIsAlwaysAdmitted) {
  const auto v = check_budget(budget_limits{}, {1'000'000'000, 1'000'000'000},
                              {1'000'000'000, 1'000'000'000}, {5, 5}, noon);
  EXPECT_TRUE(v.admitted);
  EXPECT_EQ(v.limit, budget_limit::none);
  EXPECT_FALSE(budget_limits{}.any());
}

TEST(BudgetCheckTest, AKeyIsRefusedOnceItsDaysTokensReachTheLimitUntilTheDayEnds) {
  const budget_limits limits{.tokens_per_day = 1000};
  EXPECT_TRUE(check_budget(limits, {999, 0}, {999, 0}, {}, noon).admitted);
  const auto v = check_budget(limits, {1000, 0}, {1000, 0}, {}, noon);
  EXPECT_FALSE(v.admitted);
  EXPECT_EQ(v.limit, budget_limit::tokens_per_day);
  EXPECT_EQ(name_of(v.limit), "max_tokens_per_day");
  EXPECT_EQ(v.retry_after_s, 12 * 3600);
  EXPECT_TRUE(v.settled);
  // The next day admits again: its settled usage starts from nothing.
  EXPECT_TRUE(check_budget(limits, {0, 0}, {1000, 0}, {}, mar_1_2024).admitted);
}

TEST(BudgetCheckTest, InFlightEstimatesCountSoConcurrentRequestsCannotAllSlipUnder) {
  const budget_limits limits{.tokens_per_day = 1000};
  EXPECT_TRUE(check_budget(limits, {600, 0}, {600, 0}, {399, 0}, noon).admitted);
  const auto v = check_budget(limits, {600, 0}, {600, 0}, {400, 0}, noon);
  EXPECT_FALSE(v.admitted);
  EXPECT_EQ(v.limit, budget_limit::tokens_per_day);
  // Only the estimates reached it: the requests' ends may give some back.
  EXPECT_FALSE(v.settled);
}

TEST(BudgetCheckTest, AMonthsExhaustedBudgetOutlastsADaysAndIsTheOneReported) {
  const budget_limits limits{.tokens_per_day = 100, .tokens_per_month = 5000};
  const std::int64_t feb_28_noon = noon - 86400;
  const auto v = check_budget(limits, {100, 0}, {5000, 0}, {}, feb_28_noon);
  EXPECT_FALSE(v.admitted);
  EXPECT_EQ(v.limit, budget_limit::tokens_per_month);
  EXPECT_EQ(v.retry_after_s, 36 * 3600);  // the 29th is February's last day
  EXPECT_TRUE(v.settled);
  // A month with room and a day without: the day's end.
  const auto day = check_budget(limits, {100, 0}, {200, 0}, {}, feb_28_noon);
  EXPECT_EQ(day.limit, budget_limit::tokens_per_day);
  EXPECT_EQ(day.retry_after_s, 12 * 3600);
}

TEST(BudgetCheckTest, SpendBudgetsCountBillionthsOfADollar) {
  const budget_limits limits{.spend_nanousd_per_day = 2'000'000'000,
                             .spend_nanousd_per_month = 10'000'000'000};
  EXPECT_TRUE(check_budget(limits, {0, 1'999'999'999}, {0, 1'999'999'999}, {}, noon).admitted);
  const auto day =
      check_budget(limits, {0, 1'500'000'000}, {0, 1'500'000'000}, {0, 500'000'000}, noon);
  EXPECT_FALSE(day.admitted);
  EXPECT_EQ(day.limit, budget_limit::spend_per_day);
  EXPECT_FALSE(day.settled);
  const auto month = check_budget(limits, {0, 0}, {0, 10'000'000'000}, {}, feb_29_2024);
  EXPECT_EQ(month.limit, budget_limit::spend_per_month);
  EXPECT_EQ(name_of(month.limit), "max_spend_per_month");
  EXPECT_EQ(month.retry_after_s, 86400);
}

TEST(BudgetCheckTest, AtEqualWaitsTheBudgetTheSettledUsageExhaustedIsReported) {
  // Both day budgets reached, the tokens only by estimates, the spend by what is settled.
  const budget_limits limits{.tokens_per_day = 100, .spend_nanousd_per_day = 50};
  const auto v = check_budget(limits, {10, 50}, {10, 50}, {90, 0}, noon);
  EXPECT_EQ(v.limit, budget_limit::spend_per_day);
  EXPECT_TRUE(v.settled);
}

TEST(BudgetCheckTest, HugeCountsSaturateInsteadOfWrappingUnderTheLimit) {
  const budget_limits limits{.tokens_per_day = 1000};
  EXPECT_FALSE(check_budget(limits, {~0ULL, 0}, {~0ULL, 0}, {10, 0}, noon).admitted);
}

}  // namespace
}  // namespace tether::ledger
