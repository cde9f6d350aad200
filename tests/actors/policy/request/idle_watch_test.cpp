#include "actors/policy/request/idle_watch.hpp"

#include <gtest/gtest.h>

namespace tether {
namespace {

using namespace std::chrono_literals;
using duration = idle_watch::duration;

TEST(IdleWatchTest, OneTimerPerPeriodAndIdleExactlyALimitAfterTheLastEvent) {
  idle_watch watch{100ms};
  EXPECT_TRUE(watch.on_event(duration{0}));  // the first event arms the timer
  EXPECT_FALSE(watch.on_event(duration{30ms}));
  EXPECT_FALSE(watch.on_event(duration{90ms}));
  // Fired at 100 ms: the last event was at 90, so 90 ms more.
  EXPECT_EQ(watch.on_fire(duration{100ms}), std::optional<duration>{90ms});
  // Fired again at 190 ms: nothing since 90, the limit has passed.
  EXPECT_EQ(watch.on_fire(duration{190ms}), std::nullopt);
}

// A clock moved 1 ms at a time: an event every 20 ms for a second, then silence. The one timer
// fires when due and is sent back to wait while events come; it fires a handful of times, not
// once per event, and finds the stream idle exactly 50 ms after the last event.
TEST(IdleWatchTest, AStreamThatKeepsTalkingIsNeverIdleAndAQuietOneIsAtTheLimit) {
  idle_watch watch{50ms};
  bool armed = false;
  duration due{0};
  int firings = 0;
  duration last_event{0};
  for (duration t{0}; t <= 2000ms; t += 1ms) {
    if (t <= 1000ms && t.count() % duration{20ms}.count() == 0) {
      last_event = t;
      if (watch.on_event(t)) {
        armed = true;
        due = t + watch.limit();
      }
    }
    if (armed && t == due) {
      ++firings;
      if (auto again = watch.on_fire(t)) {
        ASSERT_GT(*again, duration{0});
        due = t + *again;
      } else {
        EXPECT_EQ(t, last_event + 50ms);
        EXPECT_GT(t, 1000ms) << "idle while events still came";
        armed = false;
      }
    }
  }
  EXPECT_FALSE(armed);
  EXPECT_LE(firings, 40);  // one timer per period, not one per event (51 events)
  // After an idle verdict, the next event arms a timer again.
  EXPECT_TRUE(watch.on_event(3000ms));
}

TEST(IdleWatchTest, AFiringEarlierThanTheLimitWaitsForTheRest) {
  idle_watch watch{100ms};
  ASSERT_TRUE(watch.on_event(duration{10ms}));
  EXPECT_EQ(watch.on_fire(duration{60ms}), std::optional<duration>{50ms});
  EXPECT_EQ(watch.on_fire(duration{110ms}), std::nullopt);
}

}  // namespace
}  // namespace tether
