#include "actors/policy/routing/upstream_health.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace tether {
namespace {

using namespace std::chrono_literals;

config::gateway_config one_upstream(std::uint32_t after = 3) {
  config::gateway_config cfg;
  config::upstream_config u;
  u.name = "a";
  u.eject_after_failures = after;
  u.eject_base = 1000ms;
  u.eject_max = 3000ms;
  cfg.upstreams.push_back(u);
  return cfg;
}

class UpstreamHealthTest : public ::testing::Test {
 protected:
  UpstreamHealthTest() {
    health_.configure(one_upstream());
    health_.set_listener([this](const health_change& c) { changes_.push_back(c); });
  }
  void fail(int n, steady_time at) {
    for (int i = 0; i < n; ++i) health_.attempt_failed(0, at);
  }
  upstream_health health_;
  std::vector<health_change> changes_;
  steady_time t0_ = steady_time{} + 1000s;
};

TEST_F(UpstreamHealthTest, ConsecutiveFailuresEjectForTheBaseTimeAndTheReturnIsAnnounced) {
  fail(2, t0_);
  EXPECT_TRUE(health_.available(0, t0_));
  EXPECT_TRUE(changes_.empty());
  fail(1, t0_);
  EXPECT_FALSE(health_.available(0, t0_));
  ASSERT_EQ(changes_.size(), 1U);
  EXPECT_TRUE(changes_[0].ejected);
  EXPECT_EQ(changes_[0].reason, ejection_reason::failures);
  EXPECT_EQ(changes_[0].duration, 1000ms);
  EXPECT_EQ(health_.available_at(0), t0_ + 1000ms);
  // The sweep names when to look again, and announces the return once it is due.
  EXPECT_EQ(health_.sweep(t0_ + 500ms), t0_ + 1000ms);
  EXPECT_EQ(changes_.size(), 1U);
  EXPECT_EQ(health_.sweep(t0_ + 1000ms), std::nullopt);
  ASSERT_EQ(changes_.size(), 2U);
  EXPECT_FALSE(changes_[1].ejected);
  EXPECT_TRUE(health_.available(0, t0_ + 1000ms));
}

TEST_F(UpstreamHealthTest, ASuccessResetsTheStreak) {
  fail(2, t0_);
  health_.attempt_succeeded(0);
  fail(2, t0_);
  EXPECT_TRUE(health_.available(0, t0_));
}

TEST_F(UpstreamHealthTest, EachRepeatDoublesUpToTheMaximumAndALongCleanRunForgetsThem) {
  auto eject_at = [&](steady_time at) {
    fail(3, at);
    return changes_.back().duration;
  };
  EXPECT_EQ(eject_at(t0_), 1000ms);
  EXPECT_EQ(eject_at(t0_ + 1s), 2000ms);
  EXPECT_EQ(eject_at(t0_ + 3s), 3000ms);  // 4 s, capped
  EXPECT_EQ(eject_at(t0_ + 6s), 3000ms);
  // Out until t0 + 9 s; in service for eject_max (3 s) after that: the first length again.
  EXPECT_EQ(eject_at(t0_ + 12s), 1000ms);
}

TEST_F(UpstreamHealthTest, FailuresWhileOutAddNothing) {
  fail(3, t0_);
  fail(10, t0_ + 500ms);  // attempts that were on their way, or sent with every upstream out
  EXPECT_EQ(changes_.size(), 1U);
  EXPECT_TRUE(health_.available(0, t0_ + 1000ms));
}

TEST_F(UpstreamHealthTest, ZeroThresholdNeverEjectsAndAReloadToZeroReturnsIt) {
  fail(3, t0_);
  EXPECT_FALSE(health_.available(0, t0_));
  health_.configure(one_upstream(0));
  EXPECT_TRUE(health_.available(0, t0_));
  EXPECT_FALSE(changes_.back().ejected);
  fail(50, t0_);
  EXPECT_TRUE(health_.available(0, t0_));
}

TEST_F(UpstreamHealthTest, ACheckFailureEjectsUntilACheckPassesWhichAlsoEndsAFailureEjection) {
  health_.check_failed(0, t0_);
  EXPECT_FALSE(health_.available(0, t0_ + 1h));
  EXPECT_EQ(health_.available_at(0), steady_time::max());
  EXPECT_EQ(changes_.back().reason, ejection_reason::health_check);
  health_.check_failed(0, t0_ + 1s);  // still failing: announced once
  EXPECT_EQ(changes_.size(), 1U);
  health_.check_passed(0, t0_ + 2s);
  EXPECT_TRUE(health_.available(0, t0_ + 2s));
  EXPECT_FALSE(changes_.back().ejected);
  fail(3, t0_ + 3s);
  EXPECT_FALSE(health_.available(0, t0_ + 3s));
  health_.check_passed(0, t0_ + 3100ms);
  EXPECT_TRUE(health_.available(0, t0_ + 3100ms));
}

TEST_F(UpstreamHealthTest, ACooldownIsTheUpstreamsOwnWordCappedAndNotEndedByACheck) {
  health_.rate_limited(0, 2000ms, t0_);
  EXPECT_EQ(changes_.back().reason, ejection_reason::rate_limited);
  health_.check_passed(0, t0_ + 100ms);
  EXPECT_FALSE(health_.available(0, t0_ + 1999ms));
  EXPECT_TRUE(health_.available(0, t0_ + 2000ms));
  health_.rate_limited(0, 3600s, t0_ + 3s);  // far beyond eject_max
  EXPECT_EQ(health_.available_at(0), t0_ + 6s);
}

TEST_F(UpstreamHealthTest, AnotherNodesEjectionHoldsHereAndIsMarkedRemote) {
  health_.eject_remotely(0, ejection_reason::failures, t0_ + 4s, t0_);
  EXPECT_FALSE(health_.available(0, t0_ + 3s));
  EXPECT_TRUE(health_.available(0, t0_ + 4s));
  ASSERT_EQ(changes_.size(), 1U);
  EXPECT_TRUE(changes_[0].remote);
  health_.eject_remotely(0, ejection_reason::failures, t0_, t0_ + 5s);  // already over: ignored
  EXPECT_EQ(changes_.size(), 1U);
}

TEST_F(UpstreamHealthTest, LiveWorkAndWeightAreReadFromTheirSources) {
  std::vector<std::int64_t> live{7};
  upstream_health h{[&](std::size_t i) { return live[i]; }};
  auto cfg = one_upstream();
  cfg.upstreams[0].weight = 3;
  h.configure(cfg);
  EXPECT_EQ(h.live_work(0), 7);
  EXPECT_EQ(h.weight(0), 3U);
  EXPECT_TRUE(h.available(config::max_upstreams + 5, t0_));  // out of range: never blocked
}

}  // namespace
}  // namespace tether
