// Unit tests for health_bulletin: the budget host's record of the ejections its nodes report,
// replayed to a node that joins while they run.
#include "actors/policy/routing/health_bulletin.hpp"

#include <gtest/gtest.h>

namespace tether {
namespace {

constexpr std::int64_t ms = 1'000'000;

TEST(HealthBulletinTest, ARunningEjectionIsToldWithWhatIsLeftOfIt) {
  health_bulletin b;
  b.post("dead", 0, 5000, 100 * ms);
  auto now = b.running(1100 * ms);
  ASSERT_EQ(now.size(), 1U);
  EXPECT_EQ(now[0].upstream, "dead");
  EXPECT_EQ(now[0].reason, 0);
  EXPECT_EQ(now[0].remaining_ms, 4000);
}

TEST(HealthBulletinTest, AnEndedEjectionIsDroppedAndNoLongerTold) {
  health_bulletin b;
  b.post("dead", 0, 5000, 0);
  b.post("slow", 2, 1000, 0);
  auto later = b.running(2000 * ms);
  ASSERT_EQ(later.size(), 1U);
  EXPECT_EQ(later[0].upstream, "dead");
  EXPECT_EQ(b.size(), 1U);
  EXPECT_TRUE(b.running(5000 * ms).empty());
  EXPECT_EQ(b.size(), 0U);
}

TEST(HealthBulletinTest, TheLongestWordIsKept) {
  health_bulletin b;
  b.post("dead", 0, 10000, 0);
  b.post("dead", 2, 2000, 1000 * ms);  // ends before the running one: changes nothing
  auto now = b.running(1000 * ms);
  ASSERT_EQ(now.size(), 1U);
  EXPECT_EQ(now[0].reason, 0);
  EXPECT_EQ(now[0].remaining_ms, 9000);
  b.post("dead", 2, 20000, 1000 * ms);  // outlasts it: replaces it
  now = b.running(1000 * ms);
  ASSERT_EQ(now.size(), 1U);
  EXPECT_EQ(now[0].reason, 2);
  EXPECT_EQ(now[0].remaining_ms, 20000);
}

TEST(HealthBulletinTest, TheLastFractionOfAMillisecondIsRoundedUpAndNothingIsNotPosted) {
  health_bulletin b;
  b.post("none", 0, 0, 0);
  EXPECT_EQ(b.size(), 0U);
  b.post("dead", 0, 1, 0);
  auto now = b.running(ms / 2);
  ASSERT_EQ(now.size(), 1U);
  EXPECT_EQ(now[0].remaining_ms, 1);
}

}  // namespace
}  // namespace tether
