#include "actors/policy/router.hpp"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace tether {
namespace {

config::gateway_config two_deployments() {
  config::gateway_config cfg;
  for (const char* name : {"a", "b"}) {
    config::upstream_config u;
    u.name = name;
    cfg.upstreams.push_back(u);
  }
  config::model_config m1;
  m1.name = "llama";
  m1.upstream = "a";
  m1.upstream_model = "llama-on-a";
  m1.fallbacks = {"small"};
  auto m2 = m1;
  m2.upstream = "b";
  m2.upstream_model = "llama-on-b";
  config::model_config small;
  small.name = "small";
  small.upstream = "b";
  cfg.models = {m1, small, m2};
  return cfg;
}

TEST(RouterTest, DescribeNamesEachModelsDeploymentsAndTheChainItMayTry) {
  auto cfg = two_deployments();
  router r{cfg};
  EXPECT_EQ(r.describe(cfg),
            "route llama: deployments a (llama-on-a), b (llama-on-b); surfaces chat, completions, "
            "embeddings; tries llama -> small\n"
            "route small: deployments b (small); surfaces chat, completions, embeddings; tries "
            "small\n");
}

// a → {b, c}, b → {d, c}: depth first (a b d c), each model once, whatever the repeats.
TEST(RouterTest, ChainIsTheModelThenItsFallbacksDepthFirstEachOnce) {
  config::gateway_config cfg;
  config::upstream_config u;
  u.name = "up";
  cfg.upstreams.push_back(u);
  auto model = [&](const char* name, std::vector<std::string> fallbacks) {
    config::model_config m;
    m.name = name;
    m.upstream = "up";
    m.fallbacks = std::move(fallbacks);
    cfg.models.push_back(m);
  };
  model("a", {"b", "c"});
  model("b", {"d", "c"});
  model("c", {});
  model("d", {});
  router r{cfg};
  EXPECT_EQ(r.chain_of("a"), (std::vector<std::string>{"a", "b", "d", "c"}));
  EXPECT_EQ(r.chain_of("b"), (std::vector<std::string>{"b", "d", "c"}));
  EXPECT_EQ(r.chain_of("c"), (std::vector<std::string>{"c"}));
  EXPECT_TRUE(r.chain_of("unknown").empty());
}

TEST(RouterTest, PublicModelsAreListedOnceInConfigOrder) {
  router r{two_deployments()};
  EXPECT_EQ(r.public_models(), (std::vector<std::string>{"llama", "small"}));
  EXPECT_TRUE(r.knows("small"));
  EXPECT_FALSE(r.knows("nope"));
  EXPECT_EQ(r.fallbacks_of("llama"), (std::vector<std::string>{"small"}));
  EXPECT_EQ(r.at(1).upstream_model, "small");  // defaults to the name
}

TEST(RouterTest, FewestInFlightDeploymentIsChosen) {
  router r{two_deployments()};
  r.attempt_started(0);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(*r.choose("llama", {}), 2u);
  r.attempt_started(2);
  r.attempt_started(2);
  EXPECT_EQ(*r.choose("llama", {}), 0u);
}

TEST(RouterTest, TiesAreSpreadAcrossDeployments) {
  router r{two_deployments()};
  std::set<std::size_t> chosen;
  for (int i = 0; i < 4; ++i) chosen.insert(*r.choose("llama", {}));
  EXPECT_EQ(chosen, (std::set<std::size_t>{0, 2}));
}

TEST(RouterTest, ARetryPrefersADeploymentNotTriedYetEvenIfBusier) {
  router r{two_deployments()};
  r.attempt_started(2);
  r.attempt_started(2);
  const std::vector<std::size_t> first{0};
  const std::vector<std::size_t> both{0, 2};
  EXPECT_EQ(*r.choose("llama", first), 2u);
  EXPECT_EQ(*r.choose("llama", both), 0u);  // all tried: back to the least busy
}

}  // namespace
}  // namespace tether
