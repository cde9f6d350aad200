// What a SIGHUP reload does to what operators watch (contract, "Configuration" and "Metrics"):
// an upstream a reload removed keeps its series, its counters standing and its gauges at 0 once
// its last exchange has ended; and in a cluster, where each node reloads its own file, only the
// budget host's reload changes the cluster's caps.
#include <gtest/gtest.h>

#include <future>
#include <vector>

#include "tests/integration/harness.hpp"
#include "tests/support/taken_port.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

std::string upstream_entry(const mock_server& mock, const std::string& name, int cap) {
  return "[[upstreams]]\nname = \"" + name + "\"\nbase_url = \"" + mock.url() +
         "\"\nmax_in_flight = " + std::to_string(cap) + "\n\n";
}

std::string model_on(const std::string& name, const std::string& upstream,
                     const std::string& upstream_model) {
  return "[[models]]\nname = \"" + name + "\"\nupstream = \"" + upstream +
         "\"\nupstream_model = \"" + upstream_model + "\"\n\n";
}

std::string config_of(const std::string& sections, const std::string& extra = "") {
  return "[server]\nlisten = \"127.0.0.1:0\"\n\n[request]\ndeadline_ms = 20000\n"
         "attempt_timeout_ms = 20000\nmax_retries = 0\n\n" +
         sections + extra + "\n[telemetry]\nlog_format = \"json\"\n";
}

http_response post(gateway_process& gw, const std::string& model, const std::string& id) {
  return request("POST", gw.port(), "/v1/chat/completions", chat_body(model),
                 {{"x-request-id", id}}, 20s);
}

std::string series(const std::string& name, const std::string& upstream,
                   const std::string& more = "") {
  return name + "{upstream=\"" + upstream + "\"" + more + "}";
}

TEST(ReloadSeriesTest, ARemovedUpstreamKeepsItsSeriesItsCountersStandAndItsGaugesGoTo0) {
  mock_server mock;
  const auto kept = upstream_entry(mock, "kept", 8) + model_on("a", "kept", "mock");
  gateway_process gw{config_of(kept + upstream_entry(mock, "gone", 8) +
                               model_on("b", "gone", "mock") +
                               model_on("b-slow", "gone", "mock-delay-1500"))};
  for (int i = 0; i < 2; ++i) ASSERT_EQ(post(gw, "b", "b" + std::to_string(i)).status, 200);
  const auto ok_attempts = series("tether_upstream_attempts_total", "gone", ",outcome=\"ok\"");
  const auto work = series("tether_upstream_work_in_flight", "gone");
  const auto healthy = series("tether_upstream_healthy", "gone");
  ASSERT_EQ(metric(gw.port(), ok_attempts), 2);
  ASSERT_EQ(metric(gw.port(), healthy), 1);

  // One exchange with the upstream still running when the reload removes it.
  auto slow = std::async(std::launch::async, [&] { return post(gw, "b-slow", "slow"); });
  ASSERT_TRUE(await_metric(gw.port(), work, 1));
  auto line = reload(gw, config_of(kept));
  ASSERT_TRUE(line);
  ASSERT_NE(line->find("upstream gone removed"), std::string::npos) << *line;
  EXPECT_EQ(post(gw, "b", "after").status, 404);

  // Its series are all still there: the running exchange still counted, its counters standing.
  EXPECT_EQ(metric(gw.port(), work), 1);
  EXPECT_EQ(metric(gw.port(), ok_attempts), 2);
  EXPECT_EQ(metric(gw.port(), healthy), 0) << "a removed upstream takes no attempts";
  EXPECT_EQ(slow.get().status, 200);
  ASSERT_TRUE(access_line(gw, "slow"));

  // Once the exchange has ended: counters stand (with its attempt), gauges at 0.
  EXPECT_TRUE(await_metric(gw.port(), work, 0));
  EXPECT_EQ(metric(gw.port(), ok_attempts), 3);
  EXPECT_EQ(metric(gw.port(), series("tether_upstream_tokens_in_flight", "gone")), 0);
  EXPECT_EQ(metric(gw.port(), healthy), 0);
  EXPECT_EQ(metric(gw.port(), series("tether_retries_total", "gone", ",result=\"started\"")), 0);
  EXPECT_EQ(metric(gw.port(), series("tether_late_work_seconds_total", "gone")), 0);
  EXPECT_EQ(
      metric(gw.port(), series("tether_upstream_ejections_total", "gone", ",reason=\"failures\"")),
      0);
  EXPECT_EQ(metric(gw.port(), "tether_requests_total{model=\"b\",outcome=\"ok\"}"), 2);
  // The kept upstream is untouched.
  EXPECT_EQ(post(gw, "a", "kept").status, 200);
  EXPECT_EQ(metric(gw.port(), series("tether_upstream_healthy", "kept")), 1);
  EXPECT_EQ(metric(gw.port(), series("tether_upstream_attempts_total", "kept", ",outcome=\"ok\"")),
            1);
}

// ---- a reload in a cluster ------------------------------------------------------------------

std::string node_config(const mock_server& mock, int cap, const std::string& cluster) {
  return config_of(upstream_entry(mock, "mock", cap) + model_on("slow", "mock", "mock-delay-300"),
                   "[cluster]\n" + cluster + "\n");
}

// Sends n requests from `gw` at once and returns the mock's max_active over them.
std::int64_t peak_of(mock_server& mock, gateway_process& gw, int n, const std::string& prefix) {
  mock.reset();
  std::vector<std::future<http_response>> calls;
  for (int i = 0; i < n; ++i) {
    calls.push_back(std::async(std::launch::async, [&gw, id = prefix + std::to_string(i)] {
      return post(gw, "slow", id);
    }));
  }
  for (auto& c : calls) EXPECT_EQ(c.get().status, 200);
  auto stats = mock.stats();
  EXPECT_EQ(stats.at("requests").as_int64(), n);
  return stats.at("max_active").as_int64();
}

TEST(ReloadSeriesTest, InAClusterOnlyTheBudgetHostsReloadChangesTheClustersCap) {
  mock_server mock;
  const auto port = free_port();
  const auto listen = "budget_listen = \"127.0.0.1:" + std::to_string(port) + "\"";
  const auto joined = "budget_host = \"127.0.0.1:" + std::to_string(port) + "\"";
  gateway_process host{node_config(mock, 2, listen)};
  gateway_process member{node_config(mock, 2, joined)};
  ASSERT_TRUE(await_metric(member.port(), "tether_cluster_connected", 1, 5s));
  ASSERT_EQ(peak_of(mock, member, 6, "before"), 2);

  // The member's own file raised: the host's cap still holds its requests.
  ASSERT_TRUE(reload(member, node_config(mock, 8, joined)));
  EXPECT_EQ(peak_of(mock, member, 8, "member-raised"), 2);

  // The host's file raised: the member's requests get the new cap at once.
  ASSERT_TRUE(reload(host, node_config(mock, 4, listen)));
  EXPECT_EQ(peak_of(mock, member, 8, "host-raised"), 4);

  // The member's own file lowered below it: the host's cap is still the one that counts.
  ASSERT_TRUE(reload(member, node_config(mock, 1, joined)));
  EXPECT_EQ(peak_of(mock, member, 8, "member-lowered"), 4);
  EXPECT_EQ(metric(member.port(), "tether_cluster_connected"), 1);
}

}  // namespace
}  // namespace tether::test
