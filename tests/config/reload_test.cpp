// Unit tests for plan_reload: what a reloaded file changes, with every upstream and key at the
// index it had.
#include "config/reload.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/loader.hpp"

namespace tether::config {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Not;

gateway_config load(const std::string& toml) {
  auto r =
      load_string(toml, "tether.toml", [](const std::string& name) -> std::optional<std::string> {
        if (name == "KEY") return "secret-value";
        return std::nullopt;
      });
  EXPECT_THAT(r.errors, IsEmpty());
  return r.config.value_or(gateway_config{});
}

std::string upstream(const std::string& name, int port, const std::string& more = "") {
  return "[[upstreams]]\nname = \"" + name +
         "\"\nbase_url = \"http://127.0.0.1:" + std::to_string(port) + "\"\n" + more + "\n";
}

std::string model(const std::string& name, const std::string& on) {
  return "[[models]]\nname = \"" + name + "\"\nupstream = \"" + on + "\"\n\n";
}

std::string key(const std::string& name, char digit, int cap = 0) {
  return "[[keys]]\nname = \"" + name + "\"\nsha256 = \"" + std::string(64, digit) +
         "\"\nmodels = [\"*\"]\nmax_in_flight = " + std::to_string(cap) + "\n\n";
}

std::vector<std::string> names(const gateway_config& cfg) {
  std::vector<std::string> out;
  for (const auto& u : cfg.upstreams) out.push_back(u.name + (u.retired ? " (retired)" : ""));
  return out;
}

TEST(ReloadPlanTest, UpstreamsKeepTheirIndicesARemovedOneKeepsItsPlaceAndNewOnesAreAppended) {
  auto running = load(upstream("a", 1) + upstream("b", 2) + upstream("c", 3) + model("m", "a"));
  // The file lists them in another order, drops b and adds d.
  auto plan = plan_reload(
      running, load(upstream("d", 4) + upstream("c", 3) + upstream("a", 1) + model("m", "d")));
  ASSERT_FALSE(plan.error);
  EXPECT_THAT(names(plan.next), ElementsAre("a", "b (retired)", "c", "d"));
  EXPECT_THAT(plan.retired_upstreams, ElementsAre(1));
  EXPECT_THAT(plan.fresh_upstreams, ElementsAre(3));
  EXPECT_THAT(plan.changes, Contains("upstream b removed (its idle connections close)"));
  EXPECT_THAT(plan.changes, Contains("upstream d added"));
  EXPECT_THAT(plan.changes, Contains("model m changed"));
  EXPECT_THAT(plan.needs_restart, IsEmpty());
  // No model routes to the retired one; a lookup by name does not find it.
  EXPECT_EQ(plan.next.find_upstream("b"), nullptr);
  EXPECT_NE(plan.next.find_upstream("d"), nullptr);
}

TEST(ReloadPlanTest, AnUpstreamGetsNewConnectionsOnlyWhenItsAddressTimeoutsOrPoolChange) {
  auto running = load(upstream("a", 1) + upstream("b", 2) + upstream("c", 3) + upstream("d", 4) +
                      model("m", "a"));
  auto plan =
      plan_reload(running, load(upstream("a", 1, "api_key_env = \"KEY\"\nmax_in_flight = 64") +
                                upstream("b", 9) + upstream("c", 3, "connect_timeout_ms = 50") +
                                upstream("d", 4, "max_in_flight = 8") + model("m", "a")));
  // a: a key (its cap is the default): the same connections; b: another port; c: another
  // timeout; d: another pool size.
  EXPECT_THAT(plan.fresh_upstreams, ElementsAre(1, 2, 3));
  EXPECT_THAT(plan.changes, Contains("upstream a changed"));
  EXPECT_THAT(plan.changes, Contains("upstream b changed (new connections)"));
  EXPECT_EQ(plan.next.upstreams[0].api_key, "secret-value");
}

TEST(ReloadPlanTest, HealthSettingsChangeAnUpstreamWithoutNewConnections) {
  const std::vector<std::string> settings = {
      "weight = 3",          "eject_after_failures = 0",  "eject_base_ms = 100",
      "eject_max_ms = 9000", "health_path = \"/health\"", "health_interval_ms = 250",
  };
  std::string running_file;
  std::string loaded_file;
  for (std::size_t i = 0; i < settings.size(); ++i) {
    const auto name = "u" + std::to_string(i);
    running_file += upstream(name, static_cast<int>(i) + 1);
    loaded_file += upstream(name, static_cast<int>(i) + 1, settings[i]);
  }
  running_file += model("m", "u0");
  loaded_file += model("m", "u0");
  auto running = load(running_file);
  auto plan = plan_reload(running, load(loaded_file));
  ASSERT_FALSE(plan.error);
  EXPECT_THAT(plan.fresh_upstreams, IsEmpty());  // the pools stay
  EXPECT_THAT(plan.retired_upstreams, IsEmpty());
  EXPECT_THAT(plan.changes,
              ElementsAre("upstream u0 changed", "upstream u1 changed", "upstream u2 changed",
                          "upstream u3 changed", "upstream u4 changed", "upstream u5 changed"));
  const auto& u = plan.next.upstreams;
  ASSERT_EQ(u.size(), settings.size());
  EXPECT_EQ(u[0].weight, 3u);
  EXPECT_EQ(u[1].eject_after_failures, 0u);
  EXPECT_EQ(u[2].eject_base, std::chrono::milliseconds(100));
  EXPECT_EQ(u[3].eject_max, std::chrono::milliseconds(9000));
  EXPECT_EQ(u[4].health_path, "/health");
  EXPECT_EQ(u[5].health_interval, std::chrono::milliseconds(250));

  // The same health settings again: nothing changed.
  auto same = plan_reload(plan.next, load(loaded_file));
  EXPECT_THAT(same.changes, IsEmpty());
  // An address change with a health change: new connections, said once.
  auto both = plan_reload(running, load(upstream("u0", 99, "weight = 3") + model("m", "u0")));
  EXPECT_THAT(both.fresh_upstreams, ElementsAre(0));
  EXPECT_THAT(both.changes, Contains("upstream u0 changed (new connections)"));
  EXPECT_THAT(both.changes, Not(Contains("upstream u0 changed")));
}

TEST(ReloadPlanTest, AnUpstreamRemovedThenAddedBackGetsItsOldIndexAndNewConnections) {
  auto running = load(upstream("a", 1) + upstream("b", 2) + model("m", "a"));
  auto without = plan_reload(running, load(upstream("a", 1) + model("m", "a")));
  auto again = plan_reload(without.next, load(upstream("a", 1) + model("m", "a")));
  EXPECT_THAT(again.retired_upstreams, IsEmpty());  // retired already: not drained twice
  EXPECT_THAT(names(again.next), ElementsAre("a", "b (retired)"));
  auto back = plan_reload(again.next, load(upstream("a", 1) + upstream("b", 2) + model("m", "b")));
  EXPECT_THAT(names(back.next), ElementsAre("a", "b"));
  EXPECT_THAT(back.fresh_upstreams, ElementsAre(1));
  EXPECT_THAT(back.changes, Contains("upstream b added back"));
}

TEST(ReloadPlanTest, KeysKeepTheirIndicesAndARemovedKeyMatchesNoToken) {
  const auto base = upstream("a", 1) + model("m", "a");
  auto running = load(base + key("k1", 'a', 1) + key("k2", 'b'));
  auto plan = plan_reload(running, load(base + key("k3", 'c') + key("k2", 'b', 4)));
  ASSERT_EQ(plan.next.keys.size(), 3u);
  EXPECT_EQ(plan.next.keys[0].name, "k1");
  EXPECT_TRUE(plan.next.keys[0].retired);
  EXPECT_TRUE(plan.next.keys[0].sha256_hex.empty());
  EXPECT_EQ(plan.next.keys[1].name, "k2");
  EXPECT_EQ(plan.next.keys[1].max_in_flight, 4u);
  EXPECT_EQ(plan.next.keys[2].name, "k3");
  EXPECT_TRUE(plan.next.requires_keys());
  EXPECT_THAT(plan.changes, Contains("key k1 removed"));
  EXPECT_THAT(plan.changes, Contains("key k2 changed"));
  EXPECT_THAT(plan.changes, Contains("key k3 added"));

  // With every key removed, model requests no longer need one.
  auto none = plan_reload(plan.next, load(base));
  EXPECT_EQ(none.next.keys.size(), 3u);
  EXPECT_FALSE(none.next.requires_keys());
}

TEST(ReloadPlanTest, ListenClusterAndLogFormatChangesWaitForARestartWhileTheLogLevelApplies) {
  const auto base = upstream("a", 1) + model("m", "a");
  auto running = load("[server]\nlisten = \"127.0.0.1:8080\"\n" + base);
  auto plan = plan_reload(running, load("[server]\nlisten = \"127.0.0.1:9090\"\n"
                                        "max_request_bytes = 1000\n"
                                        "threads = 3\n" +
                                        base +
                                        "[cluster]\nbudget_listen = \"127.0.0.1:7000\"\n"
                                        "[telemetry]\nlog_format = \"text\"\n"
                                        "log_level = \"warn\"\n"));
  EXPECT_THAT(plan.needs_restart, ElementsAre("server.listen", "server.max_request_bytes",
                                              "server.threads", "cluster", "telemetry.log_format"));
  EXPECT_EQ(plan.next.server.threads, 0U);
  EXPECT_EQ(plan.next.server.listen_port, 8080);
  EXPECT_EQ(plan.next.server.max_request_bytes, running.server.max_request_bytes);
  EXPECT_TRUE(plan.next.cluster.budget_listen.empty());
  EXPECT_EQ(plan.next.telemetry.log_format, "json");
  EXPECT_EQ(plan.next.telemetry.log_level, "warn");
}

TEST(ReloadPlanTest, RequestBudgetAndModelChangesAreNamedAndTheSameFileChangesNothing) {
  const auto base = upstream("a", 1) + model("m", "a") + model("n", "a");
  auto running = load(base);
  auto same = plan_reload(running, load(base));
  EXPECT_THAT(same.changes, IsEmpty());
  EXPECT_THAT(same.fresh_upstreams, IsEmpty());
  EXPECT_THAT(same.retired_upstreams, IsEmpty());

  auto plan = plan_reload(running, load("[request]\ndeadline_ms = 5000\n[budget]\nqueue_max = 3\n" +
                                        upstream("a", 1) + model("m", "a") + model("o", "a")));
  EXPECT_THAT(plan.changes, Contains("[request] changed"));
  EXPECT_THAT(plan.changes, Contains("[budget] changed"));
  EXPECT_THAT(plan.changes, Contains("model o added"));
  EXPECT_THAT(plan.changes, Contains("model n removed"));
  EXPECT_EQ(plan.next.request.deadline, std::chrono::milliseconds(5000));
  EXPECT_EQ(plan.next.budget.queue_max, 3u);
}

// Prices (per deployment) and a key's budgets and admin apply on SIGHUP; [ledger] waits for a
// restart, its running values kept.
TEST(ReloadPlanTest, PricesAndBudgetsApplyWhileTheLedgerWaitsForARestart) {
  const auto base = upstream("a", 1) + upstream("b", 2);
  auto running = load(base + model("m", "a") + "price_input_per_mtok = 3\n\n" + model("m", "b") +
                      model("n", "a") + key("k1", 'a') + key("k2", 'b'));
  auto plan = plan_reload(
      running, load(base + model("m", "a") + "price_input_per_mtok = 3\n\n" + model("m", "b") +
                    "price_output_per_mtok = 0.5\n\n" + model("n", "a") + key("k1", 'a') +
                    "max_tokens_per_day = 1000\nmax_spend_per_month = 7.5\nadmin = true\n\n" +
                    key("k2", 'b') +
                    "[ledger]\npath = \"/tmp/x.db\"\nflush_interval_ms = 50\n"
                    "member_buffer_max = 7\n"));
  ASSERT_FALSE(plan.error);
  EXPECT_THAT(plan.changes, ElementsAre("key k1 changed", "model m changed"));
  EXPECT_THAT(plan.needs_restart,
              ElementsAre("ledger.path", "ledger.flush_interval_ms", "ledger.member_buffer_max"));
  const auto& next = plan.next;
  EXPECT_EQ(next.models.at(0).price_input_per_mtok, std::optional<double>(3.0));
  EXPECT_EQ(next.models.at(1).price_output_per_mtok, std::optional<double>(0.5));
  EXPECT_FALSE(next.models.at(2).price_output_per_mtok.has_value());
  EXPECT_EQ(next.keys.at(0).max_tokens_per_day, 1000U);
  EXPECT_EQ(next.keys.at(0).max_spend_per_month, 7.5);
  EXPECT_TRUE(next.keys.at(0).admin);
  EXPECT_EQ(next.ledger, running.ledger);

  // And back: a price removed, a budget lowered to none.
  auto back =
      plan_reload(next, load(base + model("m", "a") + "price_input_per_mtok = 3\n\n" +
                             model("m", "b") + model("n", "a") + key("k1", 'a') + key("k2", 'b')));
  EXPECT_THAT(back.changes, ElementsAre("key k1 changed", "model m changed"));
  EXPECT_FALSE(back.next.models.at(1).price_output_per_mtok.has_value());
  EXPECT_EQ(back.next.keys.at(0).max_tokens_per_day, 0U);
  EXPECT_FALSE(back.next.keys.at(0).admin);
}

// A gateway started without its ledger cannot honour a budget until it restarts with one: the
// file that turns the ledger on and gives a key a budget is refused, the running config stays.
TEST(ReloadPlanTest, ABudgetForAGatewayRunningWithoutItsLedgerIsRefused) {
  const auto base = upstream("a", 1) + model("m", "a") + "price_input_per_mtok = 1\n\n";
  auto running = load("[ledger]\nenabled = false\n" + base + key("k", 'a'));
  ASSERT_FALSE(running.ledger.enabled);
  for (const std::string budget :
       {"max_tokens_per_day = 5", "max_spend_per_day = 5", "max_tokens_per_month = 5",
        "max_spend_per_month = 5", "admin = true"}) {
    SCOPED_TRACE(budget);
    auto plan = plan_reload(running, load(base + key("k", 'a') + budget + "\n"));
    ASSERT_TRUE(plan.error);
    EXPECT_EQ(*plan.error, "tether.toml: key \"k\": " + budget.substr(0, budget.find(' ')) +
                               " needs the ledger, which is off in the running gateway until a "
                               "restart (ledger.enabled); restart to apply");
    EXPECT_THAT(plan.next.keys, IsEmpty());
  }
  // Turning it on alone is a restart's business, not an error.
  auto plan = plan_reload(running, load(base + key("k", 'a')));
  ASSERT_FALSE(plan.error);
  EXPECT_THAT(plan.needs_restart, ElementsAre("ledger.enabled"));
  EXPECT_FALSE(plan.next.ledger.enabled);
  // Running with it, a file that turns it off keeps it on till the restart: budgets stay valid.
  auto on = load(base + key("k", 'a') + "max_tokens_per_day = 5\n");
  auto off = plan_reload(on, load("[ledger]\nenabled = false\n" + base + key("k", 'a')));
  ASSERT_FALSE(off.error);
  EXPECT_TRUE(off.next.ledger.enabled);
  EXPECT_EQ(off.next.keys.at(0).max_tokens_per_day, 0U);
}

TEST(ReloadPlanTest, MoreUpstreamsThanTheMetricsHoldSinceTheStartIsRefused) {
  std::string many;
  for (std::size_t i = 0; i < max_upstreams; ++i) many += upstream("u" + std::to_string(i), 1);
  auto running = load(many + model("m", "u0"));
  auto plan = plan_reload(running, load(upstream("fresh", 2) + model("m", "fresh")));
  ASSERT_TRUE(plan.error);
  EXPECT_THAT(*plan.error, ::testing::HasSubstr("restart to apply"));
  EXPECT_THAT(plan.next.upstreams, IsEmpty());
}

}  // namespace
}  // namespace tether::config
