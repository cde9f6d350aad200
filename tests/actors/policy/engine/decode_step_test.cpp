#include "actors/policy/engine/decode_step.hpp"

#include <gtest/gtest.h>

namespace tether {
namespace {

using namespace std::chrono_literals;

TEST(DecodeStepTest, NothingIsObservedBeforeTheFirstSample) {
  decode_step s;
  EXPECT_FALSE(s.current());
  s.observe(0ms, 1);   // no gap: no sample
  s.observe(10ms, 0);  // no token: no sample
  EXPECT_FALSE(s.current());
}

TEST(DecodeStepTest, TheFirstSampleIsTakenAsItIsAndLaterOnesMoveItByAnEighth) {
  decode_step s;
  s.observe(40ms, 1);
  EXPECT_EQ(s.current(), 40ms);
  s.observe(120ms, 1);  // 40 + (120 - 40) / 8
  EXPECT_EQ(s.current(), 50ms);
  s.observe(10ms, 1);  // 50 + (10 - 50) / 8
  EXPECT_EQ(s.current(), 45ms);
}

TEST(DecodeStepTest, AGapThatBroughtSeveralTokensIsThatManySteps) {
  decode_step s;
  s.observe(90ms, 3);
  EXPECT_EQ(s.current(), 30ms);
}

TEST(DecodeStepTest, ASteadyEngineIsFollowedWithinAFewDozenTokens) {
  decode_step s;
  s.observe(200ms, 1);  // one slow read first
  for (int i = 0; i < 40; ++i) s.observe(20ms, 1);
  EXPECT_GT(*s.current(), 20ms);
  EXPECT_LT(*s.current(), 22ms);
}

TEST(DecodeStepTest, ATokenEventCarriesDataOtherThanDone) {
  EXPECT_TRUE(is_token_event("data: {\"choices\":[]}\n\n"));
  EXPECT_TRUE(is_token_event("event: content_block_delta\ndata: {}\n\n"));
  EXPECT_TRUE(is_token_event("data:{}\n\n"));
  EXPECT_FALSE(is_token_event("data: [DONE]\n\n"));
  EXPECT_FALSE(is_token_event(": keep-alive\n\n"));
  EXPECT_FALSE(is_token_event("retry: 10\n\n"));
}

}  // namespace
}  // namespace tether
