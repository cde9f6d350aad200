// The bench's open loop against the real tether-mock: its counts, its pool bound, and above all
// its accounting — a request is timed from its scheduled moment, so a target that cannot keep up
// is charged for the backlog in front of each request (a closed loop would time each request from
// its own send and report the mock's delay alone).
#include <algorithm>
#include <chrono>
#include <string>

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
  const auto r = run_open_loop(ctx_, ctx_.targets()[0],
                               {500, milliseconds(200), 2, 4, chat(bench_models::immediate)});
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
  const auto r =
      run_open_loop(ctx_, ctx_.targets()[0], {200, milliseconds(100), 1, 1, chat("mock-delay-20")});
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

}  // namespace
}  // namespace tether::bench
