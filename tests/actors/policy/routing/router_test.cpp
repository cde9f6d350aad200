#include "actors/policy/routing/router.hpp"
#include "actors/policy/routing/upstream_health.hpp"

#include <gtest/gtest.h>

#include <random>

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
            "embeddings, responses; tries llama -> small\n"
            "route small: deployments b (small); surfaces chat, completions, embeddings, "
            "responses; tries small\n");
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

// Live work per upstream as the budget would count it, set by hand.
struct load_board {
  std::vector<std::int64_t> live = std::vector<std::int64_t>(4, 0);
  upstream_health::load_source source() {
    return [this](std::size_t i) { return i < live.size() ? live[i] : 0; };
  }
};

const auto t0 = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);

// Two draws: low 32 bits pick the first, high 32 bits the second (each modulo the total weight).
std::uint64_t draws(std::uint32_t first, std::uint32_t second) {
  return (static_cast<std::uint64_t>(second) << 32) | first;
}

// One name on an OpenAI-API upstream and an Anthropic one: each surface reaches only the
// deployment that serves it, whatever the draws, and a surface neither serves has no route.
TEST(RouterTest, OnlyDeploymentsServingTheRequestsSurfaceAreChosen) {
  auto cfg = two_deployments();
  cfg.upstreams[1].api = config::upstream_api::anthropic;
  cfg.upstreams[1].surfaces = config::default_surfaces(config::upstream_api::anthropic);
  router r{cfg};
  load_board load;
  upstream_health health{load.source()};
  health.configure(cfg);
  EXPECT_TRUE(r.serves("llama", surface::chat));
  EXPECT_TRUE(r.serves("llama", surface::messages));
  EXPECT_FALSE(r.serves("small", surface::chat));
  EXPECT_TRUE(r.serves("small", surface::count_tokens));
  for (std::uint32_t x = 0; x < 4; ++x) {
    EXPECT_EQ(*r.choose("llama", surface::chat, {}, health, t0, draws(x, x + 1)).deployment, 0u);
    EXPECT_EQ(*r.choose("llama", surface::messages, {}, health, t0, draws(x, x + 1)).deployment,
              2u);
  }
  EXPECT_FALSE(r.choose("small", surface::responses, {}, health, t0, draws(0, 1)).deployment);
  EXPECT_TRUE(r.any_in_service("llama", surface::messages, health, t0));
  EXPECT_FALSE(r.any_in_service("small", surface::chat, health, t0));
  EXPECT_EQ(r.describe(cfg),
            "route llama: deployments a (llama-on-a), b (llama-on-b); surfaces chat, completions, "
            "embeddings, responses, messages, count_tokens; tries llama -> small\n"
            "route small: deployments b (small); surfaces messages, count_tokens; tries small\n");
}

TEST(RouterTest, OfTwoDrawsTheOneWithLessLiveWorkIsChosen) {
  auto cfg = two_deployments();
  router r{cfg};
  load_board load;
  upstream_health health{load.source()};
  health.configure(cfg);
  load.live[0] = 1;  // upstream a
  for (std::uint32_t x = 0; x < 4; ++x) {
    EXPECT_EQ(*r.choose("llama", surface::chat, {}, health, t0, draws(x, x + 1)).deployment, 2u)
        << x;
  }
  load.live[1] = 3;
  EXPECT_EQ(*r.choose("llama", surface::chat, {}, health, t0, draws(1, 0)).deployment, 0u);
  // The same deployment drawn twice is taken, however busy.
  EXPECT_EQ(*r.choose("llama", surface::chat, {}, health, t0, draws(1, 1)).deployment, 2u);
}

TEST(RouterTest, WithNoLoadTheWeightsDecideTheShare) {
  auto cfg = two_deployments();
  cfg.upstreams[0].weight = 3;
  router r{cfg};
  upstream_health health;
  health.configure(cfg);
  std::mt19937_64 gen{7};
  int on_a = 0;
  for (int i = 0; i < 4000; ++i) {
    if (*r.choose("llama", surface::chat, {}, health, t0, gen()).deployment == 0u) ++on_a;
  }
  // The first draw wins every tie: a is drawn first 3 times in 4.
  EXPECT_NEAR(on_a / 4000.0, 0.75, 0.03);
}

TEST(RouterTest, LiveWorkIsComparedPerWeight) {
  auto cfg = two_deployments();
  cfg.upstreams[0].weight = 4;
  router r{cfg};
  load_board load;
  upstream_health health{load.source()};
  health.configure(cfg);
  load.live[0] = 6;  // 6/4 = 1.5 per weight
  load.live[1] = 2;  // 2/1 = 2
  EXPECT_EQ(*r.choose("llama", surface::chat, {}, health, t0, draws(4, 0)).deployment, 0u);
  load.live[0] = 9;  // 2.25
  EXPECT_EQ(*r.choose("llama", surface::chat, {}, health, t0, draws(0, 4)).deployment, 2u);
}

TEST(RouterTest, ARetryPrefersADeploymentNotTriedYetEvenIfBusier) {
  auto cfg = two_deployments();
  router r{cfg};
  load_board load;
  upstream_health health{load.source()};
  health.configure(cfg);
  load.live[1] = 2;
  const std::vector<std::size_t> first{0};
  const std::vector<std::size_t> both{0, 2};
  EXPECT_EQ(*r.choose("llama", surface::chat, first, health, t0, draws(0, 0)).deployment, 2u);
  // All tried: back to the least busy.
  EXPECT_EQ(*r.choose("llama", surface::chat, both, health, t0, draws(1, 0)).deployment, 0u);
}

TEST(RouterTest, AnEjectedUpstreamGetsNoAttemptWhileAnotherIsInService) {
  auto cfg = two_deployments();
  cfg.upstreams[0].eject_after_failures = 1;
  router r{cfg};
  upstream_health health;
  health.configure(cfg);
  health.attempt_failed(0, t0);
  std::mt19937_64 gen{1};
  for (int i = 0; i < 50; ++i) {
    auto c = r.choose("llama", surface::chat, {}, health, t0 + std::chrono::seconds(1), gen());
    EXPECT_TRUE(c.healthy);
    EXPECT_EQ(*c.deployment, 2u);
  }
  // Its ejection over, it is drawn again.
  std::set<std::size_t> chosen;
  for (int i = 0; i < 50; ++i)
    chosen.insert(*r.choose("llama", surface::chat, {}, health, t0 + std::chrono::seconds(6), gen())
                       .deployment);
  EXPECT_EQ(chosen, (std::set<std::size_t>{0, 2}));
}

// No deployment in service: the attempts spread over them all as usual (the one back soonest
// could be a dead one that would take every try), a retry prefers one not tried yet, and
// `available_at` says when the first comes back.
TEST(RouterTest, WithEveryUpstreamOutTheAttemptsSpreadOverAllARetryToOneNotTried) {
  auto cfg = two_deployments();
  cfg.upstreams[0].eject_after_failures = 1;
  cfg.upstreams[1].eject_after_failures = 1;
  cfg.upstreams[1].eject_base = std::chrono::milliseconds(1000);
  router r{cfg};
  load_board load;
  upstream_health health{load.source()};
  health.configure(cfg);
  health.attempt_failed(0, t0);
  health.attempt_failed(1, t0);
  const auto now = t0 + std::chrono::milliseconds(10);
  std::mt19937_64 gen{3};
  std::set<std::size_t> chosen;
  for (int i = 0; i < 50; ++i) {
    auto c = r.choose("llama", surface::chat, {}, health, now, gen());
    EXPECT_FALSE(c.healthy);
    EXPECT_EQ(c.available_at, t0 + std::chrono::seconds(1));  // b's ejection (1 s) ends first
    chosen.insert(*c.deployment);
  }
  EXPECT_EQ(chosen, (std::set<std::size_t>{0, 2}));
  // The usual choice: the less live work per weight of the two drawn.
  load.live[1] = 1;
  EXPECT_EQ(*r.choose("llama", surface::chat, {}, health, now, draws(1, 0)).deployment, 0u);
  // A retry goes to the one not tried, busier or not, whatever the draws.
  const std::vector<std::size_t> tried_a{0};
  for (std::uint32_t x = 0; x < 4; ++x)
    EXPECT_EQ(*r.choose("llama", surface::chat, tried_a, health, now, draws(x, x)).deployment, 2u);
  // A health check failing on both (back at no known time): still spread.
  load.live[1] = 0;
  health.check_failed(0, now);
  health.check_failed(1, now);
  chosen.clear();
  for (int i = 0; i < 50; ++i)
    chosen.insert(*r.choose("llama", surface::chat, {}, health, now, gen()).deployment);
  EXPECT_EQ(chosen, (std::set<std::size_t>{0, 2}));
  EXPECT_FALSE(r.choose("unknown", surface::chat, {}, health, t0, 0).deployment.has_value());
}

TEST(RouterTest, AnExcludedDeploymentIsNeverChosen) {
  auto cfg = two_deployments();
  router r{cfg};
  upstream_health health;
  health.configure(cfg);
  const std::vector<std::size_t> b{2};
  std::mt19937_64 gen{5};
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(*r.choose("llama", surface::chat, {}, health, t0, gen(), b).deployment, 0u);
  const std::vector<std::size_t> both{0, 2};
  EXPECT_FALSE(r.choose("llama", surface::chat, {}, health, t0, gen(), both).deployment);
}

}  // namespace
}  // namespace tether
