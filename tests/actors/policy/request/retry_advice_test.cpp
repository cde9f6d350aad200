#include "actors/policy/request/retry_advice.hpp"

#include <gtest/gtest.h>

namespace tether {
namespace {

using namespace std::chrono_literals;

TEST(RetryAdviceTest, OverloadAndDrainingAdviseARetry) {
  EXPECT_TRUE(client_should_retry(outcome::overloaded, 1000ms, std::nullopt));
  EXPECT_TRUE(client_should_retry(outcome::overloaded, 1000ms, 200ms));
  EXPECT_TRUE(client_should_retry(outcome::shutting_down, 1000ms, std::nullopt));
}

TEST(RetryAdviceTest, ARateLimitIsWorthARetryOnlyWhenItsWaitFitsTheCallersDeadline) {
  EXPECT_TRUE(client_should_retry(outcome::upstream_rate_limited, 30000ms, std::nullopt));
  EXPECT_TRUE(client_should_retry(outcome::upstream_rate_limited, std::nullopt, std::nullopt));
  EXPECT_TRUE(client_should_retry(outcome::upstream_rate_limited, 2000ms, 5000ms));
  EXPECT_TRUE(client_should_retry(outcome::upstream_rate_limited, 5000ms, 5000ms));
  EXPECT_FALSE(client_should_retry(outcome::upstream_rate_limited, 30000ms, 10000ms));
  EXPECT_FALSE(client_should_retry(outcome::upstream_rate_limited, std::nullopt, 10000ms));
  // The gateway's own per-key limit (rate_limited) is advised the same way.
  EXPECT_TRUE(client_should_retry(outcome::rate_limited, 2000ms, 5000ms));
  EXPECT_FALSE(client_should_retry(outcome::rate_limited, 30000ms, 10000ms));
}

TEST(RetryAdviceTest, AnExhaustedBudgetIsWorthARetryOnlyInsideTheCallersOwnDeadline) {
  EXPECT_TRUE(client_should_retry(outcome::budget_exhausted, 2000ms, 5000ms));
  EXPECT_FALSE(client_should_retry(outcome::budget_exhausted, 3600000ms, 10000ms));
  // No deadline of its own: a wait to the end of a day is not a blind retry's.
  EXPECT_FALSE(client_should_retry(outcome::budget_exhausted, 2000ms, std::nullopt));
}

TEST(RetryAdviceTest, EveryOtherOutcomeAdvisesAgainst) {
  for (int i = 0; i < outcome_count; ++i) {
    auto o = static_cast<outcome>(i);
    if (o == outcome::overloaded || o == outcome::shutting_down ||
        o == outcome::upstream_rate_limited || o == outcome::rate_limited)
      continue;
    EXPECT_FALSE(client_should_retry(o, 1000ms, std::nullopt)) << to_string(o);
  }
}

}  // namespace
}  // namespace tether
