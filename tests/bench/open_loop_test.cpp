// The bench's open loop against the real tether-mock: its counts, its pool bound, and above all
// its accounting — a request is timed from its scheduled moment, so a target that cannot keep up
// is charged for the backlog in front of each request (a closed loop would time each request from
// its own send and report the mock's delay alone).
#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "bench/bench/bench_context.hpp"
#include "bench/bench/open_loop.hpp"
#include "tests/support/mock_server.hpp"

namespace tether::bench {
namespace {

class OpenLoopTest : public ::testing::Test {
 protected:
  tcp::endpoint mock_endpoint() const {
    return {boost::asio::ip::address_v4::loopback(), mock_.port()};
  }
  std::shared_ptr<const std::string> chat(const std::string& model) const {
    return make_request("127.0.0.1:" + std::to_string(mock_.port()), "/v1/chat/completions",
                        chat_body(model, false));
  }

  test::mock_server mock_;
  bench_context ctx_{{{"direct", mock_endpoint(), std::nullopt}}, mock_endpoint(), {}};
};

TEST_F(OpenLoopTest, SendsTheScheduleAndStaysWithinThePool) {
  const auto r =
      run_open_loop(ctx_, ctx_.targets()[0],
                    {500, milliseconds(200), 2, 4, chat(bench_models::immediate), std::nullopt});
  EXPECT_EQ(r.scheduled, 100U);
  EXPECT_EQ(r.ok, 100U);
  EXPECT_EQ(r.failed + r.unfinished, 0U);
  EXPECT_EQ(r.latencies_ms.size(), 100U);
  EXPECT_GE(r.peak_in_flight, 1U);
  EXPECT_LE(r.peak_in_flight, 4U);
}

TEST_F(OpenLoopTest, ABacklogIsChargedFromEachRequestsScheduledMoment) {
  // One connection, an answer after 20 ms, a request due every 5 ms: request k cannot end before
  // k + 1 answers have, (k + 1) × 20 ms after the first moment, and was due at 5k ms — so its
  // latency is at least 20 + 15k ms, where its own exchange takes ≈20.
  const auto r = run_open_loop(ctx_, ctx_.targets()[0],
                               {200, milliseconds(100), 1, 1, chat("mock-delay-20"), std::nullopt});
  ASSERT_EQ(r.scheduled, 20U);
  ASSERT_EQ(r.ok, 20U);
  EXPECT_EQ(r.peak_in_flight, 1U);
  auto latencies = r.latencies_ms;
  std::sort(latencies.begin(), latencies.end());
  for (std::size_t k = 0; k < latencies.size(); ++k) {
    // 1 ms for the clocks' granularity; the bound grows by 15 ms a request.
    EXPECT_GE(latencies[k], 20.0 + 15.0 * static_cast<double>(k) - 1.0) << "request " << k;
  }
  EXPECT_GT(r.late_sends, 0U);  // all but the first waited for the connection
}

TEST_F(OpenLoopTest, AStalledTargetHoldsWhatFallsDueAndTheScheduleGoesOn) {
  // The mock stopped from 100 to 250 ms of a 600 ms schedule at 500 req/s: nothing due in that
  // window can be answered before 250 ms, the requests keep going out (they wait in the kernel),
  // and the backlog drains once the mock runs again.
  const int pid = mock_.process().pid();
  const auto r = run_open_loop(ctx_, ctx_.targets()[0],
                               {500, milliseconds(600), 8, 256, chat(bench_models::immediate),
                                open_loop_stall{milliseconds(100), milliseconds(150), {pid}}});
  ASSERT_EQ(r.scheduled, 300U);
  ASSERT_EQ(r.ok, 300U);
  ASSERT_EQ(r.by_moment.size(), 300U);
  EXPECT_TRUE(std::is_sorted(r.by_moment.begin(), r.by_moment.end()));
  std::size_t held = 0;
  for (const auto& [moment, latency] : r.by_moment) {
    if (moment < 110 || moment > 240) continue;
    ++held;
    // 5 ms for the timers' and the signals' slack.
    EXPECT_GE(latency, 250 - moment - 5) << "due at " << moment << " ms";
  }
  EXPECT_GE(held, 60U);
  EXPECT_GT(r.peak_in_flight, 8U);  // the backlog needed more connections than the warm pool
  const auto drained = recovery_ms(r.by_moment, 250, 5.0, 20);
  ASSERT_TRUE(drained.has_value());
  EXPECT_LT(*drained, 300);
  // The mock runs again after the loop, whatever happened in it.
  EXPECT_EQ(mock_.stats().at("active").as_int64(), 0);
}

TEST(RecoveryTest, IsTheFirstRequestAfterTheResumeThatBeginsARunOfNormalAnswers) {
  // Due every 10 ms; a stall ends at 100 ms; the answers are slow up to 150 ms, one is slow
  // again at 200 ms.
  std::vector<std::pair<double, double>> by_moment;
  for (int k = 0; k < 40; ++k) {
    const double moment = 10.0 * k;
    const double latency = (moment >= 100 && moment < 150) || moment == 200 ? 40.0 : 1.0;
    by_moment.emplace_back(moment, latency);
  }
  EXPECT_EQ(recovery_ms(by_moment, 100, 5.0, 3), std::optional<double>(50));
  // 150 to 190 are five normal answers: not six in a row, so the run begins after 200's.
  EXPECT_EQ(recovery_ms(by_moment, 100, 5.0, 5), std::optional<double>(50));
  EXPECT_EQ(recovery_ms(by_moment, 100, 5.0, 6), std::optional<double>(110));
  EXPECT_EQ(recovery_ms(by_moment, 100, 50.0, 3), std::optional<double>(0));
  EXPECT_EQ(recovery_ms(by_moment, 100, 5.0, 100), std::nullopt);  // never that many in a row
}

TEST(TimelineTest, GroupsTheLatenciesByTheStepInWhichEachRequestWasDue) {
  // Due every 10 ms from 0 to 390; slow (100 ms) from 100 to 149, otherwise 1 ms, but 2 ms at 60.
  std::vector<std::pair<double, double>> by_moment;
  for (int k = 0; k < 40; ++k) {
    const double moment = 10.0 * k;
    const double latency = moment >= 100 && moment < 150 ? 100.0 : moment == 60 ? 2.0 : 1.0;
    by_moment.emplace_back(moment, latency);
  }
  const auto steps = timeline(by_moment, 50, 200, 50);
  ASSERT_EQ(steps.size(), 3u);  // 50, 100, 150: what is due before 50 or from 200 is left out
  EXPECT_EQ(steps[0].due_ms, 50);
  EXPECT_EQ(steps[0].requests, 5u);
  EXPECT_EQ(steps[0].p50_ms, 1);
  EXPECT_EQ(steps[0].p99_ms, 2);
  EXPECT_EQ(steps[1].due_ms, 100);
  EXPECT_EQ(steps[1].requests, 5u);
  EXPECT_EQ(steps[1].p50_ms, 100);
  EXPECT_EQ(steps[2].due_ms, 150);
  EXPECT_EQ(steps[2].p99_ms, 1);
  // A step with no request due is not listed.
  EXPECT_TRUE(timeline(by_moment, 400, 500, 50).empty());
}

}  // namespace
}  // namespace tether::bench
