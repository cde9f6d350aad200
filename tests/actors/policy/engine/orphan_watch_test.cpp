// Unit tests for orphan_watch: an engine's excess over tether's live work counts as orphaned only
// once grace_polls polls in a row saw it, and then as the least of what they saw.
#include "actors/policy/engine/orphan_watch.hpp"

#include <gtest/gtest.h>

namespace tether {
namespace {

TEST(OrphanWatchTest, AnExcessCountsOnlyAfterThreePollsInARowSawIt) {
  static_assert(orphan_watch::grace_polls == 3);
  orphan_watch w;
  w.observe(3, 1);
  EXPECT_EQ(w.orphaned(), 0);
  w.observe(3, 1);
  EXPECT_EQ(w.orphaned(), 0);
  w.observe(3, 1);
  EXPECT_EQ(w.orphaned(), 2);
}

TEST(OrphanWatchTest, TheExcessShownIsTheLeastOfTheGracesPolls) {
  orphan_watch w;
  w.observe(2, 0);
  w.observe(2, 0);
  w.observe(4, 0);  // a transient extra: a request of tether's that just ended, say
  EXPECT_EQ(w.orphaned(), 2);
  w.observe(1, 0);
  EXPECT_EQ(w.orphaned(), 1);
}

TEST(OrphanWatchTest, OnePollWithoutAnExcessEndsIt) {
  orphan_watch w;
  for (int i = 0; i < 5; ++i) w.observe(2, 1);
  EXPECT_EQ(w.orphaned(), 1);
  w.observe(1, 1);
  EXPECT_EQ(w.orphaned(), 0);
  w.observe(2, 1);
  w.observe(2, 1);
  EXPECT_EQ(w.orphaned(), 0) << "a new streak needs its own grace";
  w.observe(2, 1);
  EXPECT_EQ(w.orphaned(), 1);
}

TEST(OrphanWatchTest, TethersOwnWorkIsNeverOrphaned) {
  orphan_watch w;
  for (int i = 0; i < 5; ++i) w.observe(4, 4);
  EXPECT_EQ(w.orphaned(), 0);
  for (int i = 0; i < 5; ++i) w.observe(1, 3);  // slots held past the engine's work: no excess
  EXPECT_EQ(w.orphaned(), 0);
}

TEST(OrphanWatchTest, AFailedPollStartsTheStreakAgain) {
  orphan_watch w;
  for (int i = 0; i < 3; ++i) w.observe(2, 0);
  EXPECT_EQ(w.orphaned(), 2);
  w.forget();
  EXPECT_EQ(w.orphaned(), 0);
  w.observe(2, 0);
  w.observe(2, 0);
  EXPECT_EQ(w.orphaned(), 0);
  w.observe(2, 0);
  EXPECT_EQ(w.orphaned(), 2);
}

}  // namespace
}  // namespace tether
