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

// Three deployments of "agent" with routing = "prefix" (on upstreams a, b, c), and "plain",
// least work, falling back to it.
config::gateway_config prefix_fleet() {
  config::gateway_config cfg;
  for (const char* name : {"a", "b", "c"}) {
    config::upstream_config u;
    u.name = name;
    u.eject_after_failures = 1;
    cfg.upstreams.push_back(u);
  }
  for (const char* up : {"a", "b", "c"}) {
    config::model_config m;
    m.name = "agent";
    m.upstream = up;
    m.routing = config::routing_mode::prefix;
    m.prefix_bytes = 512;
    cfg.models.push_back(m);
  }
  config::model_config plain;
  plain.name = "plain";
  plain.upstream = "a";
  plain.fallbacks = {"agent"};
  cfg.models.push_back(plain);
  return cfg;
}

// The key decides, not the draws: every first attempt with one key goes to one deployment, its
// home, counted prefix_home; the keys spread over all three.
TEST(RouterTest, APrefixModelSendsAKeyToItsHomeWhateverTheDraws) {
  auto cfg = prefix_fleet();
  router r{cfg};
  load_board load;
  upstream_health health{load.source()};
  health.configure(cfg);
  std::mt19937_64 gen{7};
  std::set<std::size_t> homes;
  for (std::uint64_t n = 1; n <= 30; ++n) {
    const auto key = mix64(n);  // keys are hashes, spread over the ring
    const auto first = r.choose("agent", surface::chat, {}, health, t0, gen(), {}, key);
    ASSERT_TRUE(first.deployment);
    EXPECT_EQ(first.route, route_kind::prefix_home);
    homes.insert(*first.deployment);
    for (int i = 0; i < 10; ++i) {
      EXPECT_EQ(r.choose("agent", surface::chat, {}, health, t0, gen(), {}, key).deployment,
                first.deployment)
          << "key " << n;
    }
  }
  EXPECT_EQ(homes, (std::set<std::size_t>{0, 1, 2}));
  // Without a key, or on a retry, the usual choice, counted least_work.
  EXPECT_EQ(r.choose("agent", surface::chat, {}, health, t0, gen()).route, route_kind::least_work);
  // A least-work model is not counted.
  EXPECT_EQ(r.choose("plain", surface::chat, {}, health, t0, gen(), {}, 1).route, route_kind::none);
}

TEST(RouterTest, APrefixRetryLeavesTheHome) {
  auto cfg = prefix_fleet();
  router r{cfg};
  load_board load;
  upstream_health health{load.source()};
  health.configure(cfg);
  std::mt19937_64 gen{3};
  for (std::uint64_t n = 1; n <= 20; ++n) {
    const auto key = mix64(n);
    const auto home = *r.choose("agent", surface::chat, {}, health, t0, gen(), {}, key).deployment;
    const std::size_t tried[] = {home};
    const auto retry = r.choose("agent", surface::chat, tried, health, t0, gen(), {}, key);
    EXPECT_NE(*retry.deployment, home);
    EXPECT_EQ(retry.route, route_kind::least_work);
  }
}

// The home busy past the bound: the key goes to the next deployment on its path (prefix_spill);
// the home ejected: the next one is its home while it is out.
TEST(RouterTest, APrefixKeySpillsPastABusyHomeAndSkipsAnEjectedOne) {
  auto cfg = prefix_fleet();
  router r{cfg};
  load_board load;
  upstream_health health{load.source()};
  health.configure(cfg);
  const std::uint64_t key = mix64(42);
  const auto home = *r.choose("agent", surface::chat, {}, health, t0, 0, {}, key).deployment;
  load.live[r.at(home).upstream] = 4;  // 5 of 5 with this one; the bound is ⌈1.25 × 5/3⌉ = 3
  const auto spilled = r.choose("agent", surface::chat, {}, health, t0, 0, {}, key);
  EXPECT_NE(*spilled.deployment, home);
  EXPECT_EQ(spilled.route, route_kind::prefix_spill);
  load.live[r.at(home).upstream] = 1;  // 2 with this one: ⌈1.25 × 2/3⌉ = 1 < 2, spills still
  EXPECT_EQ(r.choose("agent", surface::chat, {}, health, t0, 0, {}, key).route,
            route_kind::prefix_spill);
  load.live[r.at(home).upstream] = 0;
  EXPECT_EQ(*r.choose("agent", surface::chat, {}, health, t0, 0, {}, key).deployment, home);

  health.attempt_failed(r.at(home).upstream, t0);  // ejected
  const auto while_out = r.choose("agent", surface::chat, {}, health, t0, 0, {}, key);
  EXPECT_EQ(*while_out.deployment, *spilled.deployment);
  EXPECT_EQ(while_out.route, route_kind::prefix_home);
}

// A least-work model whose fallback routes by prefix: its requests carry a key of the
// fallback's prefix_bytes; a model with no prefix model in its chain computes none.
TEST(RouterTest, TheKeysBytesComeFromTheFirstPrefixModelOfTheChain) {
  auto cfg = prefix_fleet();
  router r{cfg};
  EXPECT_EQ(r.affinity_bytes("agent"), 512u);
  EXPECT_EQ(r.affinity_bytes("plain"), 512u);
  cfg.models[3].fallbacks.clear();
  router without{cfg};
  EXPECT_EQ(without.affinity_bytes("plain"), std::nullopt);
  EXPECT_EQ(router{two_deployments()}.affinity_bytes("llama"), std::nullopt);
}

}  // namespace
}  // namespace tether
