#include "net/timer_callback.hpp"

#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <string>

namespace {

using tether::net::timer_callback;

TEST(TimerCallbackTest, EmptyUntilGivenACallableAndEmptyAgainWhenReset) {
  timer_callback empty;
  EXPECT_FALSE(empty);
  timer_callback from_null = nullptr;
  EXPECT_FALSE(from_null);
  int runs = 0;
  timer_callback cb = [&runs] { ++runs; };
  ASSERT_TRUE(cb);
  cb();
  cb();
  EXPECT_EQ(runs, 2);
  cb = nullptr;
  EXPECT_FALSE(cb);
}

// What an actor timer captures (a reference-counted address and its message) is kept inline and
// released exactly once, wherever the callback was moved to.
TEST(TimerCallbackTest, SmallCaptureMovesWithTheCallbackAndIsReleasedOnce) {
  auto owner = std::make_shared<int>(7);
  int seen = 0;
  timer_callback first = [owner, &seen] { seen = *owner; };
  EXPECT_EQ(owner.use_count(), 2);
  timer_callback second = std::move(first);
  EXPECT_FALSE(first);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_EQ(owner.use_count(), 2);
  second();
  EXPECT_EQ(seen, 7);
  timer_callback third;
  third = std::move(second);
  EXPECT_EQ(owner.use_count(), 2);
  third = nullptr;
  EXPECT_EQ(owner.use_count(), 1);
}

TEST(TimerCallbackTest, LargeCaptureIsKeptOnTheHeapAndBehavesAlike) {
  auto owner = std::make_shared<std::string>("late");
  std::array<char, 128> padding{};
  padding[0] = 'x';
  std::string seen;
  {
    timer_callback big = [owner, padding, &seen] { seen = *owner + padding[0]; };
    EXPECT_EQ(owner.use_count(), 2);
    timer_callback moved = std::move(big);
    EXPECT_EQ(owner.use_count(), 2);
    moved();
  }
  EXPECT_EQ(seen, "latex");
  EXPECT_EQ(owner.use_count(), 1);
}

TEST(TimerCallbackTest, AssigningOverALiveCallbackReleasesTheOldCapture) {
  auto old_capture = std::make_shared<int>(1);
  auto new_capture = std::make_shared<int>(2);
  timer_callback cb = [old_capture] {};
  cb = timer_callback{[new_capture] {}};
  EXPECT_EQ(old_capture.use_count(), 1);
  EXPECT_EQ(new_capture.use_count(), 2);
}

}  // namespace
