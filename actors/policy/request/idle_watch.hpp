// A stream's idle timeout with one timer per idle period instead of one per event: each event
// only notes its time, and the timer, when it fires, either finds the stream idle for the whole
// limit or waits again for the rest of the period since the last event. Cancelling and arming a
// timer for every relayed event cost two locks and an allocation each. Times are the attempt's
// timer clock (net::timer_service::now), in nanoseconds.
#pragma once

#include <chrono>
#include <optional>

namespace tether {

class idle_watch {
 public:
  using duration = std::chrono::nanoseconds;

  explicit idle_watch(duration limit) : limit_(limit) {}

  // An event at `now`. True when no timer is pending: arm one for limit().
  bool on_event(duration now) {
    last_ = now;
    if (armed_) return false;
    armed_ = true;
    return true;
  }

  // The pending timer fired at `now`: how long to wait again (an event came within the limit),
  // or nullopt: nothing came for the whole limit, the stream is idle.
  std::optional<duration> on_fire(duration now) {
    const auto due = last_ + limit_;
    if (now < due) return due - now;
    armed_ = false;
    return std::nullopt;
  }

  duration limit() const { return limit_; }

 private:
  duration limit_;
  duration last_{0};
  bool armed_ = false;
};

}  // namespace tether
