#include "actors/policy/engine/engine_release.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tether {
namespace {

using book = engine_release_book<std::string>;
using names = std::vector<std::string>;

// Three cut attempts closed at 10, 20 and 30; each expected let go 100 later, bound 500 later.
book three_cut() {
  book b;
  b.lingering("a", 10, 110, 510);
  b.lingering("b", 20, 120, 520);
  b.lingering("c", 30, 130, 530);
  return b;
}

TEST(EngineReleaseTest,
     AnEngineWorkingOnTetherLiveWorkAloneReleasesEveryAttemptClosedBeforeThePoll) {
  auto b = three_cut();
  EXPECT_EQ(b.on_count(200, 2, 2, 210), (names{"a", "b", "c"}));
  EXPECT_EQ(b.size(), 0u);
  EXPECT_EQ(b.next_due(), std::nullopt);
}

TEST(EngineReleaseTest, TheCountsExcessOverTheLiveWorkStaysHeldOldestCloseReleasedFirst) {
  auto b = three_cut();
  // Two live, the engine at three: one of the cut attempts may still be decoding.
  EXPECT_EQ(b.on_count(200, 3, 2, 210), (names{"a", "b"}));
  EXPECT_EQ(b.size(), 1u);
  EXPECT_EQ(b.next_due(), 130);
  // The next poll finds the engine down to the live work: the last one goes.
  EXPECT_EQ(b.on_count(300, 2, 2, 310), (names{"c"}));
}

TEST(EngineReleaseTest, AnAttemptClosedAfterThePollWasSentIsNotJudgedByIt) {
  auto b = three_cut();
  // Sent at 25: "c" (closed at 30) may be in the count as live work.
  EXPECT_EQ(b.on_count(25, 0, 0, 140), (names{"a", "b"}));
  EXPECT_EQ(b.size(), 1u);
}

TEST(EngineReleaseTest, OtherClientsWorkBeyondTetherHoldsTheAttemptsUntilTheirBound) {
  auto b = three_cut();
  // Five more in the engine than tether's live work: nothing can be told let go.
  EXPECT_EQ(b.on_count(200, 7, 2, 210), names{});
  EXPECT_EQ(b.size(), 3u);
  // Past their bounds they have quit by themselves and leave the book unreleased.
  EXPECT_EQ(b.on_count(600, 7, 2, 600), names{});
  EXPECT_EQ(b.size(), 0u);
}

TEST(EngineReleaseTest, ALiveCountBelowZeroIsReadAsNone) {
  auto b = three_cut();
  EXPECT_EQ(b.on_count(200, 0, -1, 210), (names{"a", "b", "c"}));
}

TEST(EngineReleaseTest, WithoutACountTheAttemptsExpectedLetGoGoOnTheirDecodeSteps) {
  auto b = three_cut();
  EXPECT_EQ(b.take_due(120), (names{"a", "b"}));
  EXPECT_EQ(b.next_due(), 130);
  EXPECT_EQ(b.take_all(), (names{"c"}));
  EXPECT_EQ(b.size(), 0u);
}

}  // namespace
}  // namespace tether
