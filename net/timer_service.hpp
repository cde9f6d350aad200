// Cancellable timers on the io threads. Actors use these instead of CAF 0.17's delayed_send,
// whose pending message holds a strong reference to the receiver until it fires: every finished
// request's actor state stayed in memory until its deadline would have passed (issue #6).
// A cancelled timer is freed at once; a fired one runs its callback on an io thread.
#pragma once

#include <chrono>
#include <memory>

#include "net/timer_callback.hpp"

namespace tether::net {

class io_group;

class timer {
 public:
  virtual ~timer() = default;
  // Thread-safe, idempotent: after it returns the callback will not start.
  virtual void cancel() = 0;
};

class timer_service {
 public:
  virtual ~timer_service() = default;
  // Due `delay` from now (the moment of this call: arming does not wait for the io thread).
  virtual std::shared_ptr<timer> start(std::chrono::nanoseconds delay, timer_callback fire) = 0;
  // The clock the delays count on (the steady clock; a test's own clock in the actor tests).
  virtual std::chrono::nanoseconds now() const {
    return std::chrono::steady_clock::now().time_since_epoch();
  }
};

// The gateway's: each timer on the timer_heap of the io thread that arms it (member 0 from a
// thread outside the group). (The actor tests use a clock of their own, advanced by hand.)
std::unique_ptr<timer_service> make_io_timer_service(const io_group& io);

}  // namespace tether::net
