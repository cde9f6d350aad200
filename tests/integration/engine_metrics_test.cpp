// The engine's own account from outside (docs/contract.md, "The work ends in the engine": engine
// metrics): tether polls the upstream's metrics_path, exports the engine's running and queued
// requests, and shows as orphaned the work the engine does beyond tether's live requests there —
// after a grace of three polls in a row, and never for tether's own requests. tether-mock's
// /metrics reports its active requests under llama.cpp's names; a client that talks to the mock
// directly is work no request of tether's accounts for.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/harness.hpp"
#include "tests/support/leaving_client.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

constexpr int interval_ms = 100;

const std::string running = R"(tether_engine_requests{upstream="mock",state="running"})";
const std::string queued = R"(tether_engine_requests{upstream="mock",state="queued"})";
const std::string orphaned = R"(tether_engine_orphaned_requests{upstream="mock"})";
const std::string work = R"(tether_upstream_work_in_flight{upstream="mock"})";
std::string polls(const std::string& result) {
  return R"(tether_engine_metrics_polls_total{upstream="mock",result=")" + result + "\"}";
}

// One upstream "mock" whose engine is polled with `engine_keys`; models "hang" (never answers)
// and "short" (answers after 20 ms). upstream_stream is pinned so that what the gateway sends the
// mock is what the caller asked for, whatever the engine's default.
std::string config_with(const mock_server& mock, const std::string& engine_keys) {
  return "[server]\nlisten = \"127.0.0.1:0\"\n\n[request]\ndeadline_ms = 60000\n"
         "attempt_timeout_ms = 60000\n\n[[upstreams]]\nname = \"mock\"\nbase_url = \"" +
         mock.url() + "\"\n" + every_surface + "\nmax_in_flight = 64\n" + engine_keys + "\n\n" +
         model_entry("hang", "mock-hang") + model_entry("short", "mock-delay-20") +
         "\n[telemetry]\nlog_format = \"json\"\n";
}

std::string polled(int interval = interval_ms) {
  return "engine = \"llamacpp\"\nupstream_stream = \"as_requested\"\nmetrics_path = "
         "\"/metrics\"\nmetrics_interval_ms = " +
         std::to_string(interval) + "\n";
}

std::unique_ptr<leaving_client> hanging(std::uint16_t port, const std::string& model = "hang") {
  return std::make_unique<leaving_client>(port, "/v1/chat/completions", chat_body(model));
}

// Waits until the gateway has counted `n` more polls with `result` than `from`.
bool await_polls(std::uint16_t port, const std::string& result, double from, int n,
                 std::chrono::milliseconds timeout = 5s) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (metric_if_present(port, polls(result)).value_or(0) >= from + n) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

TEST(EngineMetricsTest, ADirectClientsWorkIsOrphanedAfterTheGraceAndGoesWhenItLeaves) {
  mock_server mock;
  gateway_process gw{config_with(mock, polled())};
  ASSERT_TRUE(await_metric(gw.port(), running, 0, 3s));
  EXPECT_EQ(metric(gw.port(), queued), 0);
  EXPECT_EQ(metric(gw.port(), orphaned), 0);
  // Polled with upstream_stream = "as_requested", llama.cpp would miss a non-streaming caller's
  // leaving: the gateway says so.
  EXPECT_TRUE(gw.process()
                  .wait_for_line(std::regex("upstream mock: its metrics poll is traffic to "
                                            "llama.cpp.*upstream_stream = ..always.. stops it"),
                                 1s)
                  .has_value());

  // tether's own work: two callers the mock holds. The engine runs two, tether has two live: no
  // orphan, poll after poll.
  auto a = hanging(gw.port());
  auto b = hanging(gw.port());
  mock.wait_for_stats([](const auto& s) { return s.at("active").as_int64() == 2; });
  ASSERT_TRUE(await_metric(gw.port(), running, 2, 3s));
  const double before = metric(gw.port(), polls("ok"));
  double most = 0;
  while (metric(gw.port(), polls("ok")) < before + 6) {  // twice the grace
    most = std::max(most, metric(gw.port(), orphaned));
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(most, 0) << "tether's own requests are never orphaned";
  EXPECT_EQ(metric(gw.port(), work), 2);

  // A client that talks to the engine directly: after the grace, one request orphaned.
  auto direct = hanging(mock.port(), "mock-hang");
  auto stats = mock.wait_for_stats([](const auto& s) { return s.at("active").as_int64() == 3; });
  ASSERT_EQ(stats.at("active").as_int64(), 3);
  double direct_started_ms = 0;
  for (const auto& e : mock_log(stats)) {
    if (!e.at("headers").as_object().contains("x-request-id"))
      direct_started_ms = num(e.at("started_ms"));
  }
  ASSERT_GT(direct_started_ms, 0) << "the direct request is in the mock's log";
  ASSERT_TRUE(await_metric(gw.port(), orphaned, 1, 3s));
  const double shown_ms = epoch_ms_now();
  EXPECT_EQ(metric(gw.port(), running), 3);
  // The grace: three polls in a row saw it, two intervals at least after the engine had it.
  EXPECT_GE(shown_ms - direct_started_ms, 2 * interval_ms - 10);

  // It leaves: the next poll sees no excess, and the gauge is 0 again.
  direct->leave();
  EXPECT_TRUE(await_metric(gw.port(), orphaned, 0, 2s));
  EXPECT_TRUE(await_metric(gw.port(), running, 2, 2s));
  a->leave();
  b->leave();
  EXPECT_TRUE(await_metric(gw.port(), running, 0, 3s));
  EXPECT_EQ(metric(gw.port(), orphaned), 0);
}

// Requests of tether's that start and end all the time (each poll catches some in the engine,
// some just ended or just begun): none of it is ever orphaned work.
TEST(EngineMetricsTest, TethersOwnChurningRequestsAreNeverOrphaned) {
  mock_server mock;
  gateway_process gw{config_with(mock, polled())};
  ASSERT_TRUE(await_metric(gw.port(), running, 0, 3s));
  std::atomic<bool> stop{false};
  std::atomic<int> served{0};
  std::vector<std::thread> callers;
  for (int i = 0; i < 4; ++i) {
    callers.emplace_back([&] {
      while (!stop) {
        if (request("POST", gw.port(), "/v1/chat/completions", chat_body("short")).status == 200)
          ++served;
      }
    });
  }
  const double before = metric(gw.port(), polls("ok"));
  double most = 0;
  double busiest = 0;
  while (metric(gw.port(), polls("ok")) < before + 12) {
    most = std::max(most, metric(gw.port(), orphaned));
    busiest = std::max(busiest, metric(gw.port(), running));
    std::this_thread::sleep_for(5ms);
  }
  stop = true;
  for (auto& t : callers) t.join();
  EXPECT_GT(served, 20);
  EXPECT_GT(busiest, 0) << "the polls saw tether's requests in the engine";
  EXPECT_EQ(most, 0);
}

// A poll that gets no usable answer is counted by its result and leaves the engine's requests
// unknown (no series), and the gateway says why once.
TEST(EngineMetricsTest, FailedAndUnreadablePollsAreCountedAndLeaveTheCountsUnknown) {
  mock_server mock;
  gateway_process gw{config_with(
      mock, "engine = \"llamacpp\"\nmetrics_path = \"/nope\"\nmetrics_interval_ms = 100\n")};
  ASSERT_TRUE(await_polls(gw.port(), "failed", 0, 3));
  for (const auto& line : gw.process().lines()) {
    EXPECT_EQ(line.find("its metrics poll is traffic"), std::string::npos)
        << "llama.cpp's default upstream_stream is \"always\": nothing to warn of";
  }
  EXPECT_EQ(metric(gw.port(), polls("ok")), 0);
  EXPECT_FALSE(metric_if_present(gw.port(), running).has_value());
  EXPECT_FALSE(metric_if_present(gw.port(), orphaned).has_value());
  EXPECT_TRUE(gw.process()
                  .wait_for_line(std::regex("upstream mock engine metrics: the poll of /nope "
                                            "failed: status 404"),
                                 1s)
                  .has_value());

  // The mock's /metrics has llama.cpp's names, not vLLM's: read, but nothing in it.
  ASSERT_NE(reload(gw, config_with(mock,
                                   "engine = \"vllm\"\nmetrics_path = \"/metrics\"\n"
                                   "metrics_interval_ms = 100\n"))
                .value_or("")
                .find("config reloaded"),
            std::string::npos);
  ASSERT_TRUE(await_polls(gw.port(), "unreadable", 0, 3));
  EXPECT_FALSE(metric_if_present(gw.port(), running).has_value());
  EXPECT_TRUE(gw.process()
                  .wait_for_line(std::regex("upstream mock engine metrics: no sample of "
                                            "vllm:num_requests_running in /metrics"),
                                 1s)
                  .has_value());

  // Named by an override, the same text reads.
  ASSERT_NE(reload(gw, config_with(mock,
                                   "engine = \"vllm\"\nmetrics_path = \"/metrics\"\n"
                                   "metrics_interval_ms = 100\nmetrics_running_series = "
                                   "\"llamacpp:requests_processing\"\n"))
                .value_or("")
                .find("config reloaded"),
            std::string::npos);
  EXPECT_TRUE(await_metric(gw.port(), running, 0, 3s));
  EXPECT_EQ(metric(gw.port(), queued), 0) << "vLLM's queued series is absent: 0";
}

// A reload: a poll follows its upstream's settings; without metrics_path, or with the upstream
// removed, the poll stops and the upstream's engine series go.
TEST(EngineMetricsTest, AReloadStartsAndStopsThePollAndItsSeries) {
  mock_server mock;
  const auto plain = config_with(mock, "");
  gateway_process gw{plain};
  ASSERT_EQ(request("POST", gw.port(), "/v1/chat/completions", chat_body("short")).status, 200);
  EXPECT_FALSE(metric_if_present(gw.port(), polls("ok")).has_value());
  EXPECT_FALSE(metric_if_present(gw.port(), running).has_value());

  ASSERT_NE(reload(gw, config_with(mock, polled())).value_or("").find("config reloaded"),
            std::string::npos);
  ASSERT_TRUE(await_polls(gw.port(), "ok", 0, 2, 3s));
  EXPECT_EQ(metric(gw.port(), running), 0);

  ASSERT_NE(reload(gw, plain).value_or("").find("config reloaded"), std::string::npos);
  EXPECT_FALSE(metric_if_present(gw.port(), polls("ok")).has_value());
  EXPECT_FALSE(metric_if_present(gw.port(), running).has_value());
  EXPECT_FALSE(metric_if_present(gw.port(), orphaned).has_value());
  // Back with a path and a 1 s interval: the poll follows the new interval, so half an interval
  // holds at most its first poll (the 100 ms poll would have made five).
  ASSERT_NE(reload(gw, config_with(mock, polled(1000))).value_or("").find("config reloaded"),
            std::string::npos);
  const auto back = std::chrono::steady_clock::now();
  const double counted = metric(gw.port(), polls("ok"));
  std::this_thread::sleep_for(500ms);  // half an interval: at most the first poll of it
  EXPECT_LE(metric(gw.port(), polls("ok")), counted + 1);
  EXPECT_LT(std::chrono::steady_clock::now() - back, 1000ms);

  // The upstream removed (its model moved to another): its series go with it.
  mock_server other;
  const std::string moved =
      "[server]\nlisten = \"127.0.0.1:0\"\n\n[[upstreams]]\nname = \"other\"\nbase_url = \"" +
      other.url() + "\"\n" + every_surface +
      "\n\n[[models]]\nname = \"short\"\nupstream = \"other\"\nupstream_model = "
      "\"mock\"\n\n[telemetry]\nlog_format = \"json\"\n";
  ASSERT_NE(reload(gw, moved).value_or("").find("config reloaded"), std::string::npos);
  EXPECT_FALSE(metric_if_present(gw.port(), polls("ok")).has_value());
  EXPECT_FALSE(metric_if_present(gw.port(), running).has_value());
}

}  // namespace
}  // namespace tether::test
