#include "actors/policy/request/retry_policy.hpp"

#include <gtest/gtest.h>

namespace tether {
namespace {

using namespace std::chrono_literals;
using act = retry_decision::action;

retry_policy fixed_jitter(std::uint32_t retries, millis base = 100ms) {
  // Jitter pinned to its ceiling so the exponential part is visible.
  return retry_policy{retries, base, [](std::int64_t n) { return n; }};
}

attempt_report response(int status, std::optional<millis> retry_after = std::nullopt) {
  attempt_report r;
  r.end = attempt_end::response;
  r.status = status;
  r.retry_after = retry_after;
  return r;
}

attempt_report failure(attempt_end e) {
  attempt_report r;
  r.end = e;
  return r;
}

TEST(RetryPolicyTest, Upstream2xxIsPassedThrough) {
  auto p = fixed_jitter(2);
  auto d = p.decide(response(200), 0, 10s, false);
  EXPECT_EQ(d.what, act::pass_through);
  EXPECT_EQ(d.result, outcome::ok);
}

TEST(RetryPolicyTest, Upstream4xxOtherThan429IsPassedThroughWithoutRetry) {
  auto p = fixed_jitter(5);
  for (int status : {400, 401, 403, 404, 422}) {
    auto d = p.decide(response(status), 0, 10s, true);
    EXPECT_EQ(d.what, act::pass_through) << status;
    EXPECT_EQ(d.result, outcome::upstream_rejected) << status;
  }
}

TEST(RetryPolicyTest, Upstream503WithAttemptsLeftRetries) {
  auto p = fixed_jitter(2);
  for (int status : {502, 503, 504}) {
    EXPECT_EQ(p.decide(response(status), 0, 10s, false).what, act::retry) << status;
  }
}

TEST(RetryPolicyTest, TransportFailuresAndTimeoutsRetry) {
  auto p = fixed_jitter(1);
  for (auto e : {attempt_end::connect_failed, attempt_end::reset, attempt_end::malformed,
                 attempt_end::timeout}) {
    EXPECT_EQ(p.decide(failure(e), 0, std::nullopt, false).what, act::retry);
  }
}

TEST(RetryPolicyTest, Upstream500IsNotRetriedButFallsBack) {
  auto p = fixed_jitter(3);
  EXPECT_EQ(p.decide(response(500), 0, 10s, true).what, act::fallback);
  EXPECT_EQ(p.decide(response(500), 0, 10s, false).what, act::fail);
}

TEST(RetryPolicyTest, SpentRetriesFallBackWhenAFallbackExists) {
  auto p = fixed_jitter(2);
  EXPECT_EQ(p.decide(response(503), 2, 10s, true).what, act::fallback);
  auto d = p.decide(response(503), 2, 10s, false);
  EXPECT_EQ(d.what, act::fail);
  EXPECT_EQ(d.result, outcome::upstream_failed);
}

TEST(RetryPolicyTest, NothingIsRetriedOnceAByteReachedTheCaller) {
  auto p = fixed_jitter(5);
  auto r = failure(attempt_end::reset);
  r.committed = true;
  auto d = p.decide(r, 0, 10s, true);
  EXPECT_EQ(d.what, act::fail);
  EXPECT_EQ(d.result, outcome::stream_interrupted);
}

TEST(RetryPolicyTest, BackoffGrowsExponentiallyUnderFullJitter) {
  auto p = fixed_jitter(5, 100ms);
  EXPECT_EQ(p.backoff(0), 100ms);
  EXPECT_EQ(p.backoff(1), 200ms);
  EXPECT_EQ(p.backoff(3), 800ms);
  EXPECT_EQ(p.backoff(40), 30000ms);  // capped, never overflows
  retry_policy zero{5, 100ms, [](std::int64_t) { return std::int64_t{0}; }};
  EXPECT_EQ(zero.backoff(3), 0ms);
}

TEST(RetryPolicyTest, DefaultJitterStaysWithinItsCeiling) {
  retry_policy p{5, 100ms};
  for (int i = 0; i < 200; ++i) {
    auto b = p.backoff(2);
    EXPECT_GE(b, 0ms);
    EXPECT_LE(b, 400ms);
  }
}

TEST(RetryPolicyTest, RateLimitWithRetryAfterThatFitsWaitsAtLeastThatLong) {
  auto p = fixed_jitter(2, 10ms);
  auto d = p.decide(response(429, 2s), 0, 10s, false);
  EXPECT_EQ(d.what, act::retry);
  EXPECT_EQ(d.delay, 2s);
}

TEST(RetryPolicyTest, RateLimitWithRetryAfterBeyondTheBudgetEndsAtOnceWith429) {
  auto p = fixed_jitter(2);
  auto d = p.decide(response(429, 30s), 0, 5s, true);
  EXPECT_EQ(d.what, act::fail);
  EXPECT_EQ(d.result, outcome::upstream_rate_limited);
  EXPECT_EQ(d.retry_after, std::optional<millis>(30s));
}

TEST(RetryPolicyTest, OverloadedIsNeitherRetriedNorFallenBack) {
  auto p = fixed_jitter(2);
  auto d = p.decide(failure(attempt_end::overloaded), 0, 10s, true);
  EXPECT_EQ(d.what, act::fail);
  EXPECT_EQ(d.result, outcome::overloaded);
}

// Only this upstream's token cap is too small: the next model may hold the request. With no
// model left the request is overloaded, as its refused attempt was.
TEST(RetryPolicyTest, ATokenCapTooSmallFallsBackWithoutRetryAndEndsOverloadedAtTheChainsEnd) {
  auto p = fixed_jitter(2);
  auto d = p.decide(failure(attempt_end::too_heavy), 0, 10s, true);
  EXPECT_EQ(d.what, act::fallback);
  d = p.decide(failure(attempt_end::too_heavy), 0, 10s, false);
  EXPECT_EQ(d.what, act::fail);
  EXPECT_EQ(d.result, outcome::overloaded);
  EXPECT_FALSE(is_retryable(failure(attempt_end::too_heavy)));
}

TEST(RetryPolicyTest, ARefusalAtTheDrainsEndIsNeitherRetriedNorFallenBack) {
  auto p = fixed_jitter(2);
  auto d = p.decide(failure(attempt_end::shutting_down), 0, 10s, true);
  EXPECT_EQ(d.what, act::fail);
  EXPECT_EQ(d.result, outcome::shutting_down);
}

TEST(RetryPolicyTest, ExhaustedOutcomeIsTimeoutOnlyWhenEveryAttemptTimedOut) {
  retry_policy::history h;
  h.record(failure(attempt_end::timeout));
  h.record(failure(attempt_end::timeout));
  EXPECT_EQ(h.exhausted_outcome(), outcome::upstream_timeout);
  h.record(response(503));
  EXPECT_EQ(h.exhausted_outcome(), outcome::upstream_failed);
  retry_policy::history limited;
  limited.record(response(429));
  EXPECT_EQ(limited.exhausted_outcome(), outcome::upstream_rate_limited);
}

TEST(RetryPolicyTest, RetryAfterParsesDeltaSecondsOnly) {
  std::string secs = "7", date = "Wed, 21 Oct 2015 07:28:00 GMT", neg = "-1";
  EXPECT_EQ(parse_retry_after(&secs), std::optional<millis>(7s));
  EXPECT_EQ(parse_retry_after(&date), std::nullopt);
  EXPECT_EQ(parse_retry_after(&neg), std::nullopt);
  EXPECT_EQ(parse_retry_after(nullptr), std::nullopt);
}

}  // namespace
}  // namespace tether
