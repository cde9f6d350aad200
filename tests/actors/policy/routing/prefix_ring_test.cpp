#include "actors/policy/routing/prefix_ring.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace tether {
namespace {

constexpr std::size_t keys = 10000;

prefix_ring::member named(std::size_t deployment, const std::string& name,
                          std::uint32_t weight = 1) {
  return {deployment, hash_bytes(name), weight};
}

std::vector<std::size_t> homes(const prefix_ring& ring) {
  std::vector<std::size_t> out;
  for (std::size_t k = 0; k < keys; ++k)
    out.push_back(ring.order(hash_bytes(std::to_string(k)))[0]);
  return out;
}

// Four deployments, one removed: only the keys whose home it was move (each to the deployment
// after it on the ring), about a quarter of them; every other key keeps its home.
TEST(PrefixRingTest, ARemovedDeploymentMovesOnlyItsOwnShareOfTheKeys) {
  const std::vector<prefix_ring::member> four{named(0, "a"), named(1, "b"), named(2, "c"),
                                              named(3, "d")};
  // "c" gone; the deployments after it in the configuration take new indices, as on a reload.
  const std::vector<prefix_ring::member> three{named(0, "a"), named(1, "b"), named(2, "d")};
  const std::vector<std::string> names4{"a", "b", "c", "d"};
  const std::vector<std::string> names3{"a", "b", "d"};
  const auto before = homes(prefix_ring{four});
  const auto after = homes(prefix_ring{three});
  std::size_t moved = 0;
  for (std::size_t k = 0; k < keys; ++k) {
    if (names4[before[k]] == names3[after[k]]) continue;
    ++moved;
    EXPECT_EQ(names4[before[k]], "c") << "key " << k << " moved from a deployment that stayed";
  }
  const double fraction = static_cast<double>(moved) / keys;
  EXPECT_NEAR(fraction, 0.25, 0.05);
  std::cout << "moved on removal of 1 of 4: " << fraction << "\n";
}

// A fifth deployment added: the keys that move all move to it, about a fifth of them.
TEST(PrefixRingTest, AnAddedDeploymentTakesOnlyItsShareOfTheKeys) {
  const std::vector<prefix_ring::member> four{named(0, "a"), named(1, "b"), named(2, "c"),
                                              named(3, "d")};
  const std::vector<prefix_ring::member> five{named(0, "a"), named(1, "b"), named(2, "e"),
                                              named(3, "c"), named(4, "d")};
  const std::vector<std::string> names4{"a", "b", "c", "d"};
  const std::vector<std::string> names5{"a", "b", "e", "c", "d"};
  const auto before = homes(prefix_ring{four});
  const auto after = homes(prefix_ring{five});
  std::size_t moved = 0;
  for (std::size_t k = 0; k < keys; ++k) {
    if (names4[before[k]] == names5[after[k]]) continue;
    ++moved;
    EXPECT_EQ(names5[after[k]], "e") << "key " << k << " moved between deployments that stayed";
  }
  const double fraction = static_cast<double>(moved) / keys;
  EXPECT_NEAR(fraction, 0.2, 0.05);
  std::cout << "moved on adding a 5th: " << fraction << "\n";
}

// The order of the configuration's entries moves no key.
TEST(PrefixRingTest, TheOrderOfTheEntriesMovesNoKey) {
  const auto a = homes(prefix_ring{std::vector{named(0, "a"), named(1, "b"), named(2, "c")}});
  const auto b = homes(prefix_ring{std::vector{named(2, "c"), named(0, "a"), named(1, "b")}});
  EXPECT_EQ(a, b);
}

// Weights 1, 1, 2: the heavy deployment is home to about half the keys.
TEST(PrefixRingTest, EachDeploymentIsHomeToItsWeightsShareOfTheKeys) {
  const prefix_ring ring{std::vector{named(0, "a", 1), named(1, "b", 1), named(2, "c", 2)}};
  std::map<std::size_t, std::size_t> count;
  for (auto h : homes(ring)) ++count[h];
  EXPECT_NEAR(static_cast<double>(count[0]) / keys, 0.25, 0.05);
  EXPECT_NEAR(static_cast<double>(count[1]) / keys, 0.25, 0.05);
  EXPECT_NEAR(static_cast<double>(count[2]) / keys, 0.5, 0.05);
}

TEST(PrefixRingTest, TheOrderListsEveryDeploymentOnceHomeFirst) {
  const prefix_ring ring{std::vector{named(7, "a"), named(8, "b"), named(9, "c")}};
  for (std::size_t k = 0; k < 100; ++k) {
    auto order = ring.order(hash_bytes(std::to_string(k)));
    ASSERT_EQ(order.size(), 3u);
    std::sort(order.begin(), order.end());
    EXPECT_EQ(order[0], 7u);
    EXPECT_EQ(order[2], 9u);
  }
}

TEST(PrefixRingTest, ALoneRequestNeverSpills) {
  const std::vector<ring_candidate> idle{{0, 0, 1}, {1, 0, 1}, {2, 0, 1}};
  EXPECT_EQ(first_within_bound(idle, 1.25), 0u);
  const std::vector<ring_candidate> alone{{0, 0, 1}};
  EXPECT_EQ(first_within_bound(alone, 1.01), 0u);
}

// The home holds 4 of 4 live requests over three deployments: with this one, 5 over 3 is a
// share of 5/3, times 1.25 rounds up to 3; the home's 5 is past it, the next one's 1 is not.
TEST(PrefixRingTest, AHotKeySpillsToTheNextDeploymentOnTheRing) {
  const std::vector<ring_candidate> hot{{0, 4, 1}, {1, 0, 1}, {2, 0, 1}};
  EXPECT_EQ(first_within_bound(hot, 1.25), 1u);
  const std::vector<ring_candidate> at_bound{{0, 1, 1}, {1, 0, 1}, {2, 0, 1}};
  // 2 live with this one over 3: ⌈1.25 × 2/3⌉ = 1, the home's 2 is past it.
  EXPECT_EQ(first_within_bound(at_bound, 1.25), 1u);
  // A weight of 2 doubles the home's bound: ⌈1.25 × 2 × 2/4⌉ = 3 ≥ 2.
  const std::vector<ring_candidate> weighted{{0, 1, 2}, {1, 0, 1}, {2, 0, 1}};
  EXPECT_EQ(first_within_bound(weighted, 1.25), 0u);
}

// One key, 300 requests that all stay live: each goes to the first deployment on its path still
// within the bound, so no deployment ever holds more than ⌈1.25 × the mean⌉, and the home holds
// the most.
TEST(PrefixRingTest, AHotKeyNeverTakesADeploymentPastTheFactor) {
  const double factor = 1.25;
  std::vector<ring_candidate> path{{0, 0, 1}, {1, 0, 1}, {2, 0, 1}};
  std::size_t spills = 0;
  for (std::uint64_t n = 1; n <= 300; ++n) {
    const auto pick = first_within_bound(path, factor);
    ASSERT_TRUE(pick);
    spills += *pick > 0 ? 1 : 0;
    ++path[*pick].live;
    for (const auto& c : path) {
      const auto bound = static_cast<std::uint64_t>(std::ceil(factor * static_cast<double>(n) / 3));
      EXPECT_LE(c.live, bound) << "after " << n << " requests";
    }
  }
  EXPECT_GT(spills, 0u);
  EXPECT_GE(path[0].live, path[1].live);
  EXPECT_GE(path[0].live, path[2].live);
}

}  // namespace
}  // namespace tether
