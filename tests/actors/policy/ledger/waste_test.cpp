#include "actors/policy/ledger/waste.hpp"

#include <gtest/gtest.h>

namespace tether::ledger {
namespace {

constexpr std::int64_t ms = 1'000'000;

TEST(WasteTest, TheWorkAfterTheCallerLeftIsCountedAtTheStreamsOwnPace) {
  // Ten tokens in 200 ms: 20 ms each; the work ended 100 ms after the caller left.
  EXPECT_EQ(waste_tokens(0, 200 * ms, 300 * ms, 10), 5u);
  // A step that had begun counts whole.
  EXPECT_EQ(waste_tokens(0, 200 * ms, 201 * ms, 10), 1u);
  EXPECT_EQ(waste_tokens(0, 200 * ms, 241 * ms, 10), 3u);
}

TEST(WasteTest, NothingIsWastedUnlessTheCallerLeftMidStreamWhileTheWorkWentOn) {
  EXPECT_EQ(waste_tokens(0, 200 * ms, 300 * ms, 0), 0u);      // left before any token
  EXPECT_EQ(waste_tokens(0, 200 * ms, 200 * ms, 10), 0u);     // the work had ended
  EXPECT_EQ(waste_tokens(0, 200 * ms, 150 * ms, 10), 0u);     // ended before it left
  EXPECT_EQ(waste_tokens(50 * ms, 50 * ms, 90 * ms, 3), 0u);  // no time to measure a pace in
}

}  // namespace
}  // namespace tether::ledger
