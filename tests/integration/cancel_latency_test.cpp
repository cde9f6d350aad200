// tether_cancel_latency_seconds by its values, not only its count (docs/contract.md, "Metrics"):
// each cancellation is observed once, from the decision to cancel (the deadline's moment, the
// moment the caller was seen leaving) to the upstream socket closed — the same time the access
// log's cancel_latency_ms states — and lands in the buckets that time belongs in.
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

// A gateway serving only this test closes an abandoned upstream socket within a few ms even on
// two busy cores; the bucket bound leaves room for that load (and an instrumented build), not for
// a cancel that waits on a timer or on the upstream.
constexpr double tight_bound_s = TETHER_SANITIZED ? 0.1 : 0.025;

struct histogram_values {
  std::map<double, double> buckets;  // le → cumulative count; +Inf as infinity
  double sum = -1;
  double count = -1;
};

histogram_values cancel_latency_histogram(std::uint16_t port) {
  static const std::regex line{
      R"re(tether_cancel_latency_seconds(_bucket\{le="([^"]+)"\}|_sum|_count) (\S+))re"};
  histogram_values out;
  const auto body = request("GET", port, "/metrics").body;
  for (std::sregex_iterator it(body.begin(), body.end(), line), end; it != end; ++it) {
    const auto& m = *it;
    const double value = std::stod(m[3]);
    if (m[1] == "_sum") {
      out.sum = value;
    } else if (m[1] == "_count") {
      out.count = value;
    } else {
      const double le =
          m[2] == "+Inf" ? std::numeric_limits<double>::infinity() : std::stod(m[2].str());
      out.buckets[le] = value;
    }
  }
  return out;
}

class CancelLatencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gw_ = std::make_unique<gateway_process>(
        gateway_config(mock_, "deadline_ms = 30000\nattempt_timeout_ms = 30000\nmax_retries = 0",
                       model_entry("hang", "mock-hang")));
  }

  // The mock's record of the one attempt of `id`, once it has seen its connection close.
  boost::json::object closed_upstream(const std::string& id) {
    auto stats = mock_.wait_for_stats([&](const auto& s) {
      auto e = entries_of(s, id);
      return e.size() == 1 && !e[0].at("closed_ms").is_null();
    });
    auto e = entries_of(stats, id);
    EXPECT_EQ(e.size(), 1u) << id;
    if (e.empty() || e[0].at("closed_ms").is_null()) {
      ADD_FAILURE() << "the mock never saw " << id << "'s connection close";
      return {};
    }
    return e[0];
  }

  mock_server mock_;
  std::unique_ptr<gateway_process> gw_;
};

TEST_F(CancelLatencyTest, EachCancellationLandsInTheBucketsOfItsOwnLatency) {
  // A deadline: the caller's own 300 ms, over a model that never answers.
  const double deadline_sent = epoch_ms_now();
  auto late = request("POST", gw_->port(), "/v1/chat/completions", chat_body("hang"),
                      {{"x-request-id", "by-deadline"}, {"x-request-deadline-ms", "300"}});
  ASSERT_EQ(late.status, 504) << late.body;
  auto by_deadline = access_line(*gw_, "by-deadline");
  ASSERT_TRUE(by_deadline);

  // A departure: the caller closes 200 ms after sending.
  stream_options leave;
  leave.close_after = 200ms;
  auto left = stream_request("POST", gw_->port(), "/v1/chat/completions", chat_body("hang"),
                             {{"x-request-id", "by-departure"}}, leave);
  ASSERT_EQ(left.end, stream_end::stopped);
  const double left_at = epoch_ms(left.ended_at);
  auto by_departure = access_line(*gw_, "by-departure");
  ASSERT_TRUE(by_departure);

  // The access log's latencies, each the time from its decision to its socket's close there.
  const double l_deadline = num(by_deadline->at("cancel_latency_ms"));
  const double l_departure = num(by_departure->at("cancel_latency_ms"));
  EXPECT_NEAR(l_deadline,
              num(by_deadline->at("work_ended_ms")) - num(by_deadline->at("deadline_ms")), 0.01);
  EXPECT_NEAR(l_departure,
              num(by_departure->at("work_ended_ms")) - num(by_departure->at("caller_left_ms")),
              0.01);

  // Seen from outside: the decision came no earlier than the test's send + 300 ms (or its
  // close), and the socket closed no later than the mock saw it close; 1 ms for the two
  // processes' clock readings.
  const auto up_deadline = closed_upstream("by-deadline");
  const auto up_departure = closed_upstream("by-departure");
  ASSERT_FALSE(up_deadline.empty());
  ASSERT_FALSE(up_departure.empty());
  EXPECT_LE(l_deadline, num(up_deadline.at("closed_ms")) - (deadline_sent + 300) + 1.0);
  EXPECT_LE(l_departure, num(up_departure.at("closed_ms")) - left_at + 1.0);

  // The histogram holds exactly these two observations, in seconds.
  const auto h = cancel_latency_histogram(gw_->port());
  EXPECT_EQ(h.count, 2);
  EXPECT_GT(h.sum, 0.0);
  EXPECT_NEAR(h.sum, (l_deadline + l_departure) / 1e3, 1e-5);
  ASSERT_FALSE(h.buckets.empty()) << "no tether_cancel_latency_seconds_bucket series";
  for (const auto& [le, n] : h.buckets) {
    const double expected = (l_deadline / 1e3 <= le ? 1 : 0) + (l_departure / 1e3 <= le ? 1 : 0);
    EXPECT_EQ(n, expected) << "le=" << le << " (latencies " << l_deadline << " and " << l_departure
                           << " ms)";
  }
  // And both are in the fast buckets.
  ASSERT_TRUE(h.buckets.count(tight_bound_s)) << "no bucket le=" << tight_bound_s;
  EXPECT_EQ(h.buckets.at(tight_bound_s), 2)
      << "latencies " << l_deadline << " and " << l_departure << " ms";
}

}  // namespace
}  // namespace tether::test
