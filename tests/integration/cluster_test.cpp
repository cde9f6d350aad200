// A budget shared across gateway nodes through CAF's middleman (issue #7): real processes on
// 127.0.0.1 — one budget host, two members — in front of one mock whose cap is 4.
#include <gtest/gtest.h>

#include <csignal>
#include <future>
#include <regex>

#include "tests/integration/harness.hpp"
#include "tests/support/taken_port.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

std::string node_config(const mock_server& mock, const std::string& cluster) {
  auto cfg =
      gateway_config(mock, "deadline_ms = 20000\nattempt_timeout_ms = 20000\nmax_retries = 0",
                     model_entry("slow", "mock-delay-300") + model_entry("long", "mock-delay-5000"),
                     "[cluster]\n" + cluster + "\n");
  cfg.replace(cfg.find("max_in_flight = 64"), 18, "max_in_flight = 4");
  return cfg;
}

std::vector<std::future<http_response>> fire(gateway_process& gw, const std::string& model, int n,
                                             const std::string& id_prefix) {
  std::vector<std::future<http_response>> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(std::async(std::launch::async, [&gw, model, id = id_prefix + std::to_string(i)] {
      return request("POST", gw.port(), "/v1/chat/completions", chat_body(model),
                     {{"x-request-id", id}}, 30s);
    }));
  }
  return out;
}

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    budget_port_ = free_port();
    host_ = std::make_unique<gateway_process>(
        node_config(mock_, "budget_listen = \"127.0.0.1:" + std::to_string(budget_port_) + "\""));
    for (auto* m : {&a_, &b_}) {
      *m = std::make_unique<gateway_process>(
          node_config(mock_, "budget_host = \"127.0.0.1:" + std::to_string(budget_port_) + "\""));
      ASSERT_TRUE(await_metric((*m)->port(), "tether_cluster_connected", 1, 5s));
    }
  }
  mock_server mock_;
  std::uint16_t budget_port_ = 0;
  std::unique_ptr<gateway_process> host_, a_, b_;
};

TEST_F(ClusterTest, SharedCapHoldsAcrossMembersAndBothGetWork) {
  auto from_a = fire(*a_, "slow", 8, "a");
  auto from_b = fire(*b_, "slow", 8, "b");
  for (auto& f : from_a) EXPECT_EQ(f.get().status, 200);
  for (auto& f : from_b) EXPECT_EQ(f.get().status, 200);
  auto stats = mock_.stats();
  EXPECT_EQ(stats.at("requests").as_int64(), 16);
  // Sixteen callers at once: the cap was reached, and held.
  EXPECT_EQ(stats.at("max_active").as_int64(), 4);
  EXPECT_EQ(await_access_lines(*a_, 8), 8u);
  EXPECT_EQ(await_access_lines(*b_, 8), 8u);
  EXPECT_EQ(access_lines(*a_).size(), 8u);  // and not more
  EXPECT_EQ(access_lines(*b_).size(), 8u);
}

TEST_F(ClusterTest, KilledMembersSlotsAreFreedWithinOneSecond) {
  auto held = fire(*a_, "long", 4, "a");
  mock_.wait_for_stats([](const auto& s) { return s.at("active").as_int64() == 4; });
  ASSERT_EQ(mock_.stats().at("active").as_int64(), 4);
  a_->process().send_signal(SIGKILL);
  auto killed_at = epoch_ms_now();
  auto from_b = fire(*b_, "slow", 4, "b");
  for (auto& f : from_b) EXPECT_EQ(f.get().status, 200);
  for (const auto& e : mock_log(mock_.stats())) {
    if (str(e.at("headers").at("x-request-id")).rfind("b", 0) != 0) continue;
    EXPECT_LT(num(e.at("started_ms")) - killed_at, 1000.0);
  }
  for (auto& f : held) f.wait();  // the killed member's callers saw their connections drop
}

// Work the host granted keeps counting against the member's own cap once the host is gone: a
// member running 4 long requests (its cap) when the host dies starts nothing new until one ends.
TEST_F(ClusterTest, WorkGrantedByALostHostStillCountsAgainstTheMembersOwnCap) {
  auto held = fire(*a_, "long", 4, "held");
  mock_.wait_for_stats([](const auto& s) { return s.at("active").as_int64() == 4; });
  ASSERT_EQ(mock_.stats().at("active").as_int64(), 4);
  host_->process().send_signal(SIGKILL);
  host_->process().wait_exit(5s);
  ASSERT_TRUE(await_metric(a_->port(), "tether_cluster_connected", 0, 5s));
  auto after = fire(*a_, "slow", 2, "after");
  for (auto& f : after) EXPECT_EQ(f.get().status, 200);
  for (auto& f : held) EXPECT_EQ(f.get().status, 200);
  auto stats = mock_.stats();
  EXPECT_EQ(stats.at("requests").as_int64(), 6);
  EXPECT_EQ(stats.at("max_active").as_int64(), 4);  // the four long ones, and never a fifth
  // The two later requests started only when the long ones had ended.
  double first_long_end = 1e300;
  for (const auto& e : mock_log(stats)) {
    if (str(e.at("headers").at("x-request-id")).rfind("held", 0) == 0) {
      first_long_end = std::min(first_long_end, num(e.at("ended_ms")));
    }
  }
  for (const auto& e : mock_log(stats)) {
    if (str(e.at("headers").at("x-request-id")).rfind("after", 0) != 0) continue;
    EXPECT_GE(num(e.at("started_ms")) + 1.0, first_long_end);
  }
}

// The other way round: work a member started alone during the outage is registered with the host
// when the member rejoins, so the shared cap counts it until it ends.
TEST_F(ClusterTest, WorkStartedDuringTheOutageCountsAgainstTheSharedCapAfterTheRejoin) {
  host_->process().send_signal(SIGKILL);
  host_->process().wait_exit(5s);
  ASSERT_TRUE(await_metric(a_->port(), "tether_cluster_connected", 0, 5s));
  auto alone = fire(*a_, "long", 4, "alone");
  mock_.wait_for_stats([](const auto& s) { return s.at("active").as_int64() == 4; });
  ASSERT_EQ(mock_.stats().at("active").as_int64(), 4);
  host_ = std::make_unique<gateway_process>(
      node_config(mock_, "budget_listen = \"127.0.0.1:" + std::to_string(budget_port_) + "\""));
  ASSERT_TRUE(await_metric(a_->port(), "tether_cluster_connected", 1, 10s));
  ASSERT_TRUE(await_metric(b_->port(), "tether_cluster_connected", 1, 10s));
  ASSERT_TRUE(await_metric(host_->port(), "tether_cluster_slots_held{upstream=\"mock\"}", 4, 5s))
      << "the host does not count the member's running work";
  auto from_b = fire(*b_, "slow", 2, "b");
  for (auto& f : from_b) EXPECT_EQ(f.get().status, 200);
  for (auto& f : alone) EXPECT_EQ(f.get().status, 200);
  EXPECT_EQ(mock_.stats().at("max_active").as_int64(), 4);  // the four alone, and never a fifth
}

TEST_F(ClusterTest, MembersServeAloneWhileTheHostIsDownAndRejoinWhenItIsBack) {
  host_->process().send_signal(SIGKILL);
  host_->process().wait_exit(5s);
  ASSERT_TRUE(await_metric(a_->port(), "tether_cluster_connected", 0, 5s));
  ASSERT_TRUE(await_metric(b_->port(), "tether_cluster_connected", 0, 5s));
  // Still serving, each within its own copy of the cap.
  auto alone = fire(*a_, "slow", 6, "alone");
  for (auto& f : alone) EXPECT_EQ(f.get().status, 200);
  EXPECT_EQ(mock_.stats().at("max_active").as_int64(), 4);  // six callers: its whole copy, no more
  EXPECT_TRUE(a_->process().wait_for_line(std::regex("unreachable|lost the shared budget"), 1s));

  host_ = std::make_unique<gateway_process>(
      node_config(mock_, "budget_listen = \"127.0.0.1:" + std::to_string(budget_port_) + "\""));
  ASSERT_TRUE(await_metric(a_->port(), "tether_cluster_connected", 1, 10s));
  ASSERT_TRUE(await_metric(b_->port(), "tether_cluster_connected", 1, 10s));
  EXPECT_TRUE(a_->process().wait_for_line(std::regex("rejoined the shared budget"), 1s));
  mock_.reset();
  auto from_a = fire(*a_, "slow", 8, "ra");
  auto from_b = fire(*b_, "slow", 8, "rb");
  for (auto& f : from_a) EXPECT_EQ(f.get().status, 200);
  for (auto& f : from_b) EXPECT_EQ(f.get().status, 200);
  EXPECT_EQ(mock_.stats().at("max_active").as_int64(), 4);  // shared again: reached, and held
}

// A member keeps the slots the host granted it as leases: once warm, it serves without a round
// trip to the host — shown by freezing the host (SIGSTOP: its connection stays up, it answers
// nothing) and still getting an answer.
TEST_F(ClusterTest, AWarmMemberServesWithoutAskingTheHost) {
  EXPECT_EQ(fire(*a_, "slow", 1, "warm")[0].get().status, 200);
  ASSERT_TRUE(await_metric(a_->port(), "tether_upstream_work_in_flight{upstream=\"mock\"}", 0, 5s));
  ASSERT_TRUE(await_metric(host_->port(), "tether_cluster_slots_held{upstream=\"mock\"}", 1, 5s))
      << "the member gave its slot back instead of keeping it";
  host_->process().send_signal(SIGSTOP);
  auto r = request("POST", a_->port(), "/v1/chat/completions", chat_body("slow"),
                   {{"x-request-id", "frozen"}}, 5s);
  host_->process().send_signal(SIGCONT);
  EXPECT_EQ(r.status, 200);
}

// Leases do not starve other nodes: slots a member keeps idle go back the moment another member
// waits for them, long before they would expire on their own (1 s).
TEST_F(ClusterTest, AnIdleMembersLeasesGoToAnotherMemberAtOnce) {
  // Three, below the cap of four: a keeps them as leases (at the cap they would go back).
  for (auto& f : fire(*a_, "slow", 3, "a")) EXPECT_EQ(f.get().status, 200);
  ASSERT_TRUE(await_metric(a_->port(), "tether_upstream_work_in_flight{upstream=\"mock\"}", 0, 5s));
  ASSERT_TRUE(await_metric(host_->port(), "tether_cluster_slots_held{upstream=\"mock\"}", 3, 5s));
  auto fired_at = epoch_ms_now();
  auto from_b = fire(*b_, "slow", 4, "b");
  for (auto& f : from_b) EXPECT_EQ(f.get().status, 200);
  auto stats = mock_.stats();
  // b's four ran together on the slots a had kept, and nothing beside them.
  EXPECT_EQ(stats.at("max_active").as_int64(), 4);
  int seen = 0;
  for (const auto& e : mock_log(stats)) {
    if (str(e.at("headers").at("x-request-id")).rfind("b", 0) != 0) continue;
    ++seen;
    EXPECT_LT(num(e.at("started_ms")) - fired_at, 500.0);
  }
  EXPECT_EQ(seen, 4);
}

// The token cap is the cluster's (contract: "Token-aware admission"): the host counts every
// member's weights, and a killed member's weights come back with its link's down_msg.
std::string token_node_config(const mock_server& mock, const std::string& cluster) {
  auto cfg = node_config(mock, cluster);
  cfg.replace(cfg.find("max_in_flight = 4"), 17, "max_in_flight = 4\nmax_tokens_in_flight = 1000");
  return cfg;
}

std::string weighed_body(const std::string& model) {
  return R"({"model":")" + model +
         R"(","max_tokens":600,"messages":[{"role":"user","content":"hi"}]})";
}

std::future<http_response> fire_weighed(gateway_process& gw, const std::string& model,
                                        const std::string& id) {
  return std::async(std::launch::async, [&gw, model, id] {
    return request("POST", gw.port(), "/v1/chat/completions", weighed_body(model),
                   {{"x-request-id", id}}, 30s);
  });
}

TEST(ClusterTokenTest, TheTokenCapHoldsAcrossMembersAndAKilledMembersWeightReturns) {
  mock_server mock;
  const auto port = free_port();
  const auto at = "\"127.0.0.1:" + std::to_string(port) + "\"";
  gateway_process host{token_node_config(mock, "budget_listen = " + at)};
  gateway_process a{token_node_config(mock, "budget_host = " + at)};
  gateway_process b{token_node_config(mock, "budget_host = " + at)};
  for (auto* m : {&a, &b}) ASSERT_TRUE(await_metric(m->port(), "tether_cluster_connected", 1, 5s));
  // Two 600-token requests from each member: never two at once at the upstream (the slot cap, 4,
  // would allow all four).
  std::vector<std::future<http_response>> calls;
  for (int i = 0; i < 2; ++i) {
    calls.push_back(fire_weighed(a, "slow", "a" + std::to_string(i)));
    calls.push_back(fire_weighed(b, "slow", "b" + std::to_string(i)));
  }
  for (auto& c : calls) EXPECT_EQ(c.get().status, 200);
  EXPECT_EQ(mock.stats().at("requests").as_int64(), 4);
  EXPECT_EQ(mock.stats().at("max_active").as_int64(), 1);
  mock.reset();

  auto held = fire_weighed(a, "long", "held");
  mock.wait_for_stats([](const auto& s) { return s.at("active").as_int64() == 1; });
  ASSERT_TRUE(await_metric(host.port(), "tether_upstream_tokens_in_flight{upstream=\"mock\"}", 619,
                           5s));  // 77 bytes: 19 + 600
  a.process().send_signal(SIGKILL);
  const auto killed_at = epoch_ms_now();
  EXPECT_EQ(fire_weighed(b, "slow", "after").get().status, 200);
  for (const auto& e : mock_log(mock.stats())) {
    if (str(e.at("headers").at("x-request-id")) != "after") continue;
    EXPECT_LT(num(e.at("started_ms")) - killed_at, 1000.0);
  }
  held.wait();
}

// A key's rpm is the cluster's: the budget host counts every node's requests.
TEST(ClusterRateTest, TheKeysRpmIsCountedForTheWholeCluster) {
  mock_server mock;
  const std::string token = "tok-cluster-rate-42";
  const auto key = "\n[[keys]]\nname = \"team\"\nsha256 = \"" + sha256_hex(token) +
                   "\"\nmodels = [\"*\"]\nrpm = 5\n";
  const auto port = free_port();
  const auto at = "\"127.0.0.1:" + std::to_string(port) + "\"";
  gateway_process host{node_config(mock, "budget_listen = " + at + key)};
  gateway_process a{node_config(mock, "budget_host = " + at + key)};
  gateway_process b{node_config(mock, "budget_host = " + at + key)};
  for (auto* m : {&a, &b}) ASSERT_TRUE(await_metric(m->port(), "tether_cluster_connected", 1, 5s));
  const header_map team{{"authorization", "Bearer " + token}};
  auto call = [&](gateway_process& gw) {
    return request("POST", gw.port(), "/v1/chat/completions", chat_body("slow"), team).status;
  };
  for (int i = 0; i < 3; ++i) EXPECT_EQ(call(a), 200);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(call(b), 200);
  EXPECT_EQ(call(b), 429);
  EXPECT_EQ(call(a), 429);
  EXPECT_EQ(call(host), 429);
  EXPECT_EQ(mock.stats().at("requests").as_int64(), 5);
}

// Upstream health travels through the budget host (contract, "Upstream health and load-aware
// routing"): nodes with the same two deployments of a model, one of them on a port that refuses
// connections. One member's failed attempts eject it; every other node then sends it nothing.
std::string health_node_config(const mock_server& mock, std::uint16_t dead_port,
                               const std::string& cluster) {
  const std::string eject = "eject_after_failures = 2\neject_base_ms = 60000\n";
  return "[server]\nlisten = \"127.0.0.1:0\"\n\n[request]\nmax_retries = 2\nretry_backoff_ms = "
         "0\n\n"
         "[[upstreams]]\nname = \"live\"\nbase_url = \"" +
         mock.url() + "\"\n" + eject +
         "\n[[upstreams]]\nname = \"dead\"\nbase_url = \"http://127.0.0.1:" +
         std::to_string(dead_port) + "\"\n" + eject +
         "\n[[models]]\nname = \"m\"\nupstream = \"live\"\nupstream_model = \"mock\"\n"
         "\n[[models]]\nname = \"m\"\nupstream = \"dead\"\nupstream_model = \"mock\"\n"
         "\n[cluster]\n" +
         cluster + "\n\n[telemetry]\nlog_format = \"json\"\n";
}

const std::string dead_healthy = "tether_upstream_healthy{upstream=\"dead\"}";
const std::string dead_failed =
    "tether_upstream_attempts_total{upstream=\"dead\",outcome=\"upstream_failed\"}";

TEST(ClusterHealthTest, OneMembersFailuresEjectADeploymentAndTheOtherNodesSendItNothing) {
  mock_server mock;
  const auto dead_port = free_port();
  const auto budget_port = free_port();
  const auto at_host = "budget_host = \"127.0.0.1:" + std::to_string(budget_port) + "\"";
  gateway_process host{health_node_config(
      mock, dead_port, "budget_listen = \"127.0.0.1:" + std::to_string(budget_port) + "\"")};
  gateway_process a{health_node_config(mock, dead_port, at_host)};
  gateway_process b{health_node_config(mock, dead_port, at_host)};
  ASSERT_TRUE(await_metric(a.port(), "tether_cluster_connected", 1, 5s));
  ASSERT_TRUE(await_metric(b.port(), "tether_cluster_connected", 1, 5s));
  // Member A alone finds out: two failed attempts in a row (each retried on the live one).
  for (int i = 0; i < 60 && metric(a.port(), dead_failed) < 2; ++i) {
    ASSERT_EQ(request("POST", a.port(), "/v1/chat/completions", chat_body("m")).status, 200);
  }
  ASSERT_EQ(metric(a.port(), dead_failed), 2);
  ASSERT_EQ(metric(a.port(), dead_healthy), 0);
  // B and the host learn it from the host, not from attempts of their own.
  EXPECT_TRUE(await_metric(b.port(), dead_healthy, 0, 5s));
  EXPECT_TRUE(await_metric(host.port(), dead_healthy, 0, 5s));
  EXPECT_TRUE(b.process()
                  .wait_for_line(std::regex("upstream dead ejected for [0-9]+ ms: consecutive "
                                            "failed attempts \\(reported by the cluster\\)"),
                                 2s)
                  .has_value());
  mock.reset();
  for (int i = 0; i < 30; ++i) {
    ASSERT_EQ(request("POST", b.port(), "/v1/chat/completions", chat_body("m")).status, 200);
  }
  EXPECT_LE(metric(b.port(), dead_failed), 0) << "B sent attempts to the ejected deployment";
  EXPECT_EQ(num(mock.stats().at("requests")), 30);
  // The news is not echoed back: A counted one ejection, and so did B.
  const auto ejections = "tether_upstream_ejections_total{upstream=\"dead\",reason=\"failures\"}";
  EXPECT_EQ(metric(a.port(), ejections), 1);
  EXPECT_EQ(metric(b.port(), ejections), 1);
  // A node joining while the ejection runs is told at once by the host.
  gateway_process c{health_node_config(mock, dead_port, at_host)};
  ASSERT_TRUE(await_metric(c.port(), "tether_cluster_connected", 1, 5s));
  EXPECT_TRUE(await_metric(c.port(), dead_healthy, 0, 5s));
  // Cut off from the host, a member keeps its own view.
  host.process().send_signal(SIGKILL);
  host.process().wait_exit(5s);
  ASSERT_TRUE(await_metric(b.port(), "tether_cluster_connected", 0, 5s));
  EXPECT_EQ(metric(b.port(), dead_healthy), 0);
  EXPECT_EQ(request("POST", b.port(), "/v1/chat/completions", chat_body("m")).status, 200);
  EXPECT_LE(metric(b.port(), dead_failed), 0);
}

// Evidence found while cut off is not lost: a member that ejects a deployment during the host's
// outage reports it when it rejoins, and a host started afresh (with no record) passes it on.
TEST(ClusterHealthTest, AnEjectionMadeWhileCutOffReachesTheOtherNodesWhenTheHostIsBack) {
  mock_server mock;
  const auto dead_port = free_port();
  const auto budget_port = free_port();
  const auto at_host = "budget_host = \"127.0.0.1:" + std::to_string(budget_port) + "\"";
  const auto host_config = health_node_config(
      mock, dead_port, "budget_listen = \"127.0.0.1:" + std::to_string(budget_port) + "\"");
  auto host = std::make_unique<gateway_process>(host_config);
  gateway_process a{health_node_config(mock, dead_port, at_host)};
  gateway_process b{health_node_config(mock, dead_port, at_host)};
  ASSERT_TRUE(await_metric(a.port(), "tether_cluster_connected", 1, 5s));
  ASSERT_TRUE(await_metric(b.port(), "tether_cluster_connected", 1, 5s));
  host->process().send_signal(SIGKILL);
  host->process().wait_exit(5s);
  ASSERT_TRUE(await_metric(a.port(), "tether_cluster_connected", 0, 5s));
  ASSERT_TRUE(await_metric(b.port(), "tether_cluster_connected", 0, 5s));
  for (int i = 0; i < 60 && metric(a.port(), dead_failed) < 2; ++i) {
    ASSERT_EQ(request("POST", a.port(), "/v1/chat/completions", chat_body("m")).status, 200);
  }
  ASSERT_EQ(metric(a.port(), dead_healthy), 0);
  EXPECT_EQ(metric(b.port(), dead_healthy), 1) << "cut off, B cannot have heard of it";
  host = std::make_unique<gateway_process>(host_config);
  ASSERT_TRUE(await_metric(a.port(), "tether_cluster_connected", 1, 10s));
  ASSERT_TRUE(await_metric(b.port(), "tether_cluster_connected", 1, 10s));
  EXPECT_TRUE(await_metric(b.port(), dead_healthy, 0, 5s));
  EXPECT_TRUE(await_metric(host->port(), dead_healthy, 0, 5s));
}

}  // namespace
}  // namespace tether::test
