// Unit tests for the runtime: what a config, at start and at a reload, hands to the state the
// actors share. Here the keys' budgets, which the metrics export beside the ledger's usage.
#include "actors/runtime.hpp"

#include <gtest/gtest.h>

#include <string>

#include "net/io_runtime.hpp"

namespace tether {
namespace {

config::gateway_config with_key_budget(std::uint64_t tokens_per_day) {
  config::gateway_config cfg;
  config::upstream_config u;
  u.name = "a";
  u.url.host = "127.0.0.1";
  cfg.upstreams = {u};
  config::model_config m;
  m.name = "m";
  m.upstream = "a";
  m.upstream_model = "m";
  cfg.models = {m};
  config::key_config k;
  k.name = "team";
  k.max_tokens_per_day = tokens_per_day;
  cfg.keys = {k};
  return cfg;
}

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

TEST(RuntimeTest, TheKeysBudgetsReachTheMetricsAtStartAndAtEachReload) {
  net::io_runtime io;  // outlives the runtimes, whose upstream clients it runs
  const auto started = build_runtime(with_key_budget(1000), io);
  const std::string series = R"(tether_key_budget{key="team",period="day",unit="tokens"})";
  EXPECT_TRUE(has_line(started->stats->render(), series + " 1000")) << started->stats->render();
  const auto reloaded = next_runtime(*started, with_key_budget(2500), {}, io);
  share_limits_of(*reloaded);
  EXPECT_TRUE(has_line(reloaded->stats->render(), series + " 2500")) << reloaded->stats->render();
}

}  // namespace
}  // namespace tether
