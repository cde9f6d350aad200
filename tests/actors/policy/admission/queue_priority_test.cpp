// Unit tests for queue_priority: the class a request waits in and its rank in its key's lane.
#include "actors/policy/admission/queue_priority.hpp"

#include <gtest/gtest.h>

#include <string>

namespace tether {
namespace {

TEST(QueuePriorityTest, NoHeaderWaitsAsNormal) {
  auto p = priority_of(nullptr, priority::high);
  EXPECT_TRUE(p.valid);
  EXPECT_EQ(p.value, priority::normal);
}

TEST(QueuePriorityTest, TheHeaderIsReadInAnyCase) {
  const std::string high = "HiGh", low = "low";
  EXPECT_EQ(priority_of(&high, priority::high).value, priority::high);
  EXPECT_EQ(priority_of(&low, priority::high).value, priority::low);
}

TEST(QueuePriorityTest, AClassAboveTheKeysMaximumIsLoweredToIt) {
  const std::string high = "high";
  EXPECT_EQ(priority_of(&high, priority::normal).value, priority::normal);
  EXPECT_EQ(priority_of(&high, priority::low).value, priority::low);
  // A key whose highest is low waits as low even when it asks for nothing.
  EXPECT_EQ(priority_of(nullptr, priority::low).value, priority::low);
}

TEST(QueuePriorityTest, AValueThatNamesNoClassIsInvalid) {
  for (const std::string bad : {"", "urgent", "1", "high ", "normal,low"}) {
    EXPECT_FALSE(priority_of(&bad, priority::high).valid) << '"' << bad << '"';
  }
}

TEST(QueuePriorityTest, TheRankOrdersByClassThenArrival) {
  const std::int64_t early = 1'700'000'000'000'000'000, late = early + 5'000;
  EXPECT_LT(queue_rank(priority::normal, early), queue_rank(priority::normal, late));
  // A later high request ranks before an earlier normal one, and normal before low.
  EXPECT_LT(queue_rank(priority::high, late), queue_rank(priority::normal, early));
  EXPECT_LT(queue_rank(priority::normal, late), queue_rank(priority::low, early));
  // Arrivals far in the future still stay inside their class.
  const std::int64_t far = std::int64_t{1} << 62;
  EXPECT_LT(queue_rank(priority::high, far), queue_rank(priority::normal, 0));
  EXPECT_LT(queue_rank(priority::normal, far), queue_rank(priority::low, 0));
}

}  // namespace
}  // namespace tether
