#include "actors/policy/request/retry_budget.hpp"

#include <gtest/gtest.h>

namespace tether {
namespace {

TEST(RetryBudgetTest, ALoneRequestMayRetryUpToTheMinimumConcurrency) {
  retry_budget b{1, 3, 20};
  b.request_joined(0);
  EXPECT_EQ(b.limit(0), 3u);
  EXPECT_TRUE(b.try_start_retry(0));
  b.retry_ended(0);
  EXPECT_TRUE(b.try_start_retry(0));  // a second retry of the same request, the first ended
  EXPECT_EQ(b.retries_in_flight(0), 1u);
}

TEST(RetryBudgetTest, RetriesInFlightNeverExceedTheLimit) {
  retry_budget b{1, 3, 20};
  for (int i = 0; i < 20; ++i) b.request_joined(0);
  EXPECT_EQ(b.limit(0), 4u);  // 20 % of 20
  int started = 0;
  for (int i = 0; i < 20; ++i) started += b.try_start_retry(0) ? 1 : 0;
  EXPECT_EQ(started, 4);
  EXPECT_EQ(b.retries_in_flight(0), 4u);
  b.retry_ended(0);
  EXPECT_TRUE(b.try_start_retry(0));  // an ended retry frees its place
  EXPECT_FALSE(b.try_start_retry(0));
}

TEST(RetryBudgetTest, ThePercentageScalesWithRequestsInFlightAndRoundsDown) {
  retry_budget b{1, 3, 20};
  for (int i = 0; i < 100; ++i) b.request_joined(0);
  EXPECT_EQ(b.limit(0), 20u);
  for (int i = 0; i < 76; ++i) b.request_left(0);
  EXPECT_EQ(b.requests_in_flight(0), 24u);
  EXPECT_EQ(b.limit(0), 4u);  // 4.8 → 4
  for (int i = 0; i < 24; ++i) b.request_left(0);
  EXPECT_EQ(b.limit(0), 3u);  // never below the minimum
}

TEST(RetryBudgetTest, UpstreamsAreCountedApart) {
  retry_budget b{2, 1, 20};
  b.request_joined(0);
  b.request_joined(1);
  EXPECT_TRUE(b.try_start_retry(0));
  EXPECT_FALSE(b.try_start_retry(0));
  EXPECT_TRUE(b.try_start_retry(1));
  EXPECT_EQ(b.retries_in_flight(0), 1u);
  EXPECT_EQ(b.retries_in_flight(1), 1u);
}

TEST(RetryBudgetTest, AZeroMinimumAndPercentAdmitNoRetry) {
  retry_budget b{1, 0, 0};
  for (int i = 0; i < 10; ++i) b.request_joined(0);
  EXPECT_FALSE(b.try_start_retry(0));
}

TEST(RetryBudgetTest, UnknownUpstreamsAndUnmatchedEndsAreHarmless) {
  retry_budget b{1, 3, 20};
  EXPECT_FALSE(b.try_start_retry(5));
  b.retry_ended(0);
  b.request_left(0);
  EXPECT_EQ(b.retries_in_flight(0), 0u);
  EXPECT_EQ(b.requests_in_flight(0), 0u);
}

TEST(RetryBudgetTest, AReshapeAppliesTheNewLimitsToTheNextRetryAndKeepsTheCountsInFlight) {
  retry_budget b(1, 1, 0);
  b.request_joined(0);
  ASSERT_TRUE(b.try_start_retry(0));
  EXPECT_FALSE(b.try_start_retry(0));
  EXPECT_FALSE(b.try_start_retry(1));  // no such upstream yet
  b.reshape(2, 2, 0);
  EXPECT_EQ(b.retries_in_flight(0), 1u);
  EXPECT_EQ(b.requests_in_flight(0), 1u);
  EXPECT_TRUE(b.try_start_retry(0));
  EXPECT_FALSE(b.try_start_retry(0));
  EXPECT_TRUE(b.try_start_retry(1));  // the upstream a reload added
  b.reshape(1, 1, 0);                 // upstreams never shrink: index 1 keeps counting
  EXPECT_EQ(b.retries_in_flight(1), 1u);
}

}  // namespace
}  // namespace tether
