// The live gauges read their true values while the load is on, not only 0 afterwards: N callers
// whose upstream never answers, a cap of M, so exactly M are upstream work and N - M are queued,
// and all N are in flight; the gauges follow when callers leave. The global [budget] cap is
// checked against the concurrency the upstream itself saw.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/integration/harness.hpp"
#include "tests/support/leaving_client.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

const std::string work_mock = "tether_upstream_work_in_flight{upstream=\"mock\"}";

std::string capped(const mock_server& mock, int upstream_cap, const std::string& extra = "") {
  auto cfg = gateway_config(mock, "deadline_ms = 60000\nattempt_timeout_ms = 60000",
                            model_entry("hang", "mock-hang"), extra);
  cfg.replace(cfg.find("max_in_flight = 64"), std::string("max_in_flight = 64").size(),
              "max_in_flight = " + std::to_string(upstream_cap));
  return cfg;
}

std::unique_ptr<leaving_client> hanging_caller(std::uint16_t port, int i) {
  return std::make_unique<leaving_client>(
      port, "/v1/chat/completions", chat_body("hang"),
      header_map{{"x-request-id", "load-" + std::to_string(i)}});
}

// Which caller a mock log entry came from ("load-3", "global-3" → 3).
std::size_t caller_index(const boost::json::object& entry) {
  auto id = str(entry.at("headers").at("x-request-id"));
  return static_cast<std::size_t>(std::stoi(id.substr(id.find('-') + 1)));
}

TEST(GaugesTest, InFlightWorkAndQueueDepthReadTheirTrueValuesUnderLoad) {
  constexpr int callers = 5;
  constexpr int cap = 2;
  mock_server mock;
  gateway_process gw{capped(mock, cap)};
  std::vector<std::unique_ptr<leaving_client>> load;
  for (int i = 0; i < callers; ++i) load.push_back(hanging_caller(gw.port(), i));
  // The upstream has exactly `cap` of them, and the rest wait for a slot.
  auto stats = mock.wait_for_stats([](const auto& s) { return s.at("active").as_int64() == cap; });
  ASSERT_EQ(stats.at("active").as_int64(), cap);
  ASSERT_TRUE(await_metric(gw.port(), "tether_queue_depth", callers - cap, 5s));
  EXPECT_EQ(metric(gw.port(), "tether_requests_in_flight"), callers);
  EXPECT_EQ(metric(gw.port(), work_mock), cap);
  EXPECT_EQ(metric(gw.port(), "tether_queue_depth"), callers - cap);

  // One of the two at the upstream leaves: a queued one takes its slot, the others still wait.
  load[caller_index(mock_log(stats).at(0))]->leave();
  stats = mock.wait_for_stats([](const auto& s) {
    return s.at("requests").as_int64() == cap + 1 && s.at("active").as_int64() == cap;
  });
  ASSERT_EQ(stats.at("requests").as_int64(), cap + 1) << "no queued caller took the freed slot";
  ASSERT_TRUE(await_metric(gw.port(), "tether_requests_in_flight", callers - 1, 5s));
  EXPECT_EQ(metric(gw.port(), work_mock), cap);
  EXPECT_EQ(metric(gw.port(), "tether_queue_depth"), callers - cap - 1);
  EXPECT_EQ(stats.at("max_active").as_int64(), cap);

  // Everybody leaves: all three gauges come back to 0.
  for (auto& c : load) c->leave();
  EXPECT_TRUE(await_metric(gw.port(), "tether_requests_in_flight", 0, 5s));
  EXPECT_TRUE(await_metric(gw.port(), work_mock, 0, 5s));
  EXPECT_TRUE(await_metric(gw.port(), "tether_queue_depth", 0, 5s));
}

// Two upstreams (both the same mock) of 64 slots each under a global cap of 3: the mock never
// has more than 3 at once, and has 3, while 3 more wait.
TEST(GaugesTest, TheGlobalBudgetCapsTheUpstreamsConcurrencyAcrossUpstreams) {
  constexpr int callers = 6;
  constexpr int global_cap = 3;
  mock_server mock;
  auto cfg = gateway_config(mock, "deadline_ms = 60000\nattempt_timeout_ms = 60000",
                            model_entry("hang", "mock-hang") +
                                "[[models]]\nname = \"hang2\"\nupstream = \"second\"\n"
                                "upstream_model = \"mock-hang\"\n",
                            "[[upstreams]]\nname = \"second\"\nbase_url = \"" + mock.url() +
                                "\"\nmax_in_flight = 64\n\n[budget]\nmax_in_flight = " +
                                std::to_string(global_cap) + "\n");
  gateway_process gw{cfg};
  std::vector<std::unique_ptr<leaving_client>> load;
  for (int i = 0; i < callers; ++i) {
    load.push_back(std::make_unique<leaving_client>(
        gw.port(), "/v1/chat/completions", chat_body(i % 2 == 0 ? "hang" : "hang2"),
        header_map{{"x-request-id", "global-" + std::to_string(i)}}));
  }
  auto stats =
      mock.wait_for_stats([](const auto& s) { return s.at("active").as_int64() == global_cap; });
  ASSERT_EQ(stats.at("max_active").as_int64(), global_cap) << "the global cap did not hold";
  ASSERT_TRUE(await_metric(gw.port(), "tether_queue_depth", callers - global_cap, 5s));
  EXPECT_EQ(metric(gw.port(), "tether_requests_in_flight"), callers);
  EXPECT_EQ(metric(gw.port(), work_mock) +
                metric(gw.port(), "tether_upstream_work_in_flight{upstream=\"second\"}"),
            global_cap);
  // The cap holds while slots change hands: two of those at the upstream leave, and their slots
  // go to queued callers.
  int left = 0;
  for (const auto& e : mock_log(stats)) {
    if (left == 2 || str(e.at("outcome")) != "in_progress") continue;
    load[caller_index(e)]->leave();
    ++left;
  }
  ASSERT_EQ(left, 2);
  stats = mock.wait_for_stats([](const auto& s) {
    return s.at("requests").as_int64() == global_cap + 2 && s.at("active").as_int64() == global_cap;
  });
  EXPECT_EQ(stats.at("requests").as_int64(), global_cap + 2);
  EXPECT_EQ(stats.at("max_active").as_int64(), global_cap);
  for (auto& c : load) c->leave();
  EXPECT_TRUE(await_metric(gw.port(), "tether_requests_in_flight", 0, 5s));
  EXPECT_TRUE(await_metric(gw.port(), work_mock, 0, 5s));
  EXPECT_TRUE(
      await_metric(gw.port(), "tether_upstream_work_in_flight{upstream=\"second\"}", 0, 5s));
  EXPECT_EQ(mock.stats().at("max_active").as_int64(), global_cap);
}

}  // namespace
}  // namespace tether::test
