#include "actors/policy/request/deadline.hpp"

#include <gtest/gtest.h>

namespace tether {
namespace {

using namespace std::chrono_literals;

caller_budget parse(const char* v) {
  std::string s = v;
  return parse_caller_budget(&s);
}

TEST(DeadlineTest, AbsentHeaderLeavesTheConfiguredDeadline) {
  auto c = parse_caller_budget(nullptr);
  EXPECT_EQ(c.what, caller_budget::kind::absent);
  EXPECT_EQ(effective_deadline(300000ms, c), std::optional<millis>(300000ms));
  EXPECT_EQ(effective_deadline(0ms, c), std::nullopt);
}

TEST(DeadlineTest, CallerBudgetOnlyShortens) {
  EXPECT_EQ(effective_deadline(100000ms, parse("1000")), std::optional<millis>(1000ms));
  EXPECT_EQ(effective_deadline(500ms, parse("100000")), std::optional<millis>(500ms));
}

TEST(DeadlineTest, CallerBudgetAloneBoundsWhenConfiguredIsOff) {
  EXPECT_EQ(effective_deadline(0ms, parse("300")), std::optional<millis>(300ms));
}

TEST(DeadlineTest, ZeroIsASpentBudget) {
  auto c = parse("0");
  EXPECT_EQ(c.what, caller_budget::kind::valid);
  EXPECT_EQ(effective_deadline(5000ms, c), std::optional<millis>(0ms));
}

TEST(DeadlineTest, NonIntegersAreInvalid) {
  for (const char* bad : {"", "-1", "1.5", "12ms", "0x10", " ", "1 2"}) {
    EXPECT_EQ(parse(bad).what, caller_budget::kind::invalid) << bad;
  }
  EXPECT_EQ(parse(" 42 ").value, 42ms);  // surrounding whitespace is not part of the value
}

TEST(DeadlineTest, HugeValuesSaturateInsteadOfWrapping) {
  auto c = parse("999999999999999999999999999999999999");
  ASSERT_EQ(c.what, caller_budget::kind::valid);
  EXPECT_GT(c.value, millis{1'000'000'000'000LL});
  EXPECT_EQ(effective_deadline(500ms, c), std::optional<millis>(500ms));
  // Adding it to a time point must not overflow either.
  request_deadline d{std::chrono::steady_clock::now(), c.value};
  EXPECT_FALSE(d.expired(std::chrono::steady_clock::now()));
}

TEST(DeadlineTest, RemainingCountsFromArrivalAndFloorsAtZero) {
  auto t0 = std::chrono::steady_clock::time_point{} + 1h;
  request_deadline d{t0, 500ms};
  EXPECT_EQ(d.remaining(t0 + 200ms), std::optional<millis>(300ms));
  EXPECT_EQ(d.remaining(t0 + 900ms), std::optional<millis>(0ms));
  EXPECT_FALSE(d.expired(t0 + 499ms));
  EXPECT_TRUE(d.expired(t0 + 500ms));
}

// The timer is armed for the exact moment: `remaining` rounds the elapsed time up (what a chained
// gateway is told must not exceed what is left), so a timer armed for `remaining` from a moment
// 0.3 ms after arrival would fire 0.7 ms before the deadline.
TEST(DeadlineTest, DueIsArrivalPlusTheBudgetExactly) {
  auto t0 = std::chrono::steady_clock::time_point{} + 1h;
  request_deadline d{t0, 500ms};
  ASSERT_TRUE(d.due().has_value());
  EXPECT_EQ(*d.due(), t0 + 500ms);
  EXPECT_EQ(d.remaining(t0 + 300us), std::optional<millis>(499ms));
  EXPECT_FALSE(d.expired(*d.due() - 1ns));
  EXPECT_TRUE(d.expired(*d.due()));
  request_deadline unbounded{t0, std::nullopt};
  EXPECT_FALSE(unbounded.due().has_value());
}

TEST(DeadlineTest, AttemptTimeoutNeverOutlivesTheRequest) {
  auto t0 = std::chrono::steady_clock::time_point{} + 1h;
  request_deadline d{t0, 500ms};
  EXPECT_EQ(d.attempt_timer(200ms, t0), 200ms);
  // 100 ms left: the deadline comes first, so no attempt timer races it.
  EXPECT_EQ(d.attempt_timer(200ms, t0 + 400ms), 0ms);
  EXPECT_EQ(d.attempt_timer(100ms, t0 + 400ms), 0ms);
  EXPECT_EQ(d.attempt_timer(99ms, t0 + 400ms), 99ms);
  EXPECT_EQ(d.attempt_timer(0ms, t0), 0ms);  // attempt timeout off
  request_deadline unbounded{t0, std::nullopt};
  EXPECT_EQ(unbounded.attempt_timer(200ms, t0 + 10h), 200ms);
  EXPECT_EQ(unbounded.attempt_timer(0ms, t0), 0ms);
}

// A chained gateway is told the margin less than is left, so it gives up first; its answer can
// only come when at most the margin is left here, even when the attempt started a fraction of a
// millisecond after a whole one (remaining rounds the elapsed time up).
TEST(DeadlineTest, TheForwardedBudgetIsShortByTheMarginAndItsAnswerFallsWithinIt) {
  auto t0 = std::chrono::steady_clock::time_point{} + 1h;
  request_deadline d{t0, 400ms};
  ASSERT_EQ(propagation_margin, 10ms);
  EXPECT_EQ(d.forwarded(t0), std::optional<millis>(390ms));
  EXPECT_EQ(d.forwarded(t0 + 100ms + 300us), std::optional<millis>(289ms));
  EXPECT_EQ(d.forwarded(t0 + 395ms), std::optional<millis>(0ms));
  EXPECT_EQ(d.forwarded(t0 + 2s), std::optional<millis>(0ms));
  // Counted in whole ms as `remaining` counts them: 10 ms left once past 389 ms.
  EXPECT_FALSE(d.within_margin(t0 + 388ms + 999us));
  EXPECT_FALSE(d.within_margin(t0 + 389ms));
  EXPECT_TRUE(d.within_margin(t0 + 389ms + 1ns));
  EXPECT_TRUE(d.within_margin(t0 + 390ms));
  EXPECT_TRUE(d.within_margin(t0 + 400ms));
  EXPECT_TRUE(d.within_margin(t0 + 1h));
  // Wherever an attempt starts, the chained gateway's deadline (its arrival, no sooner than the
  // start, plus what it was told) falls within the margin here.
  for (auto start = t0; start < t0 + 400ms; start += 997us) {
    const auto inner_due = start + *d.forwarded(start);
    EXPECT_TRUE(d.within_margin(inner_due)) << (start - t0).count();
  }
}

TEST(DeadlineTest, AnUnboundedRequestForwardsNothingAndNothingIsWithinItsMargin) {
  auto t0 = std::chrono::steady_clock::time_point{} + 1h;
  request_deadline unbounded{t0, std::nullopt};
  EXPECT_EQ(unbounded.forwarded(t0 + 10h), std::nullopt);
  EXPECT_FALSE(unbounded.within_margin(t0 + 10h));
}

}  // namespace
}  // namespace tether
