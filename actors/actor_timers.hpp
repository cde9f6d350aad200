// Timers that message an actor without keeping it alive: the callback holds only the actor's
// address (a weak reference), and every timer still pending is cancelled when the owner ends.
// Every actor timer of the gateway is one of these, in place of delayed_send (see
// net/timer_service.hpp for why).
#pragma once

#include <caf/all.hpp>

#include <algorithm>
#include <boost/container/small_vector.hpp>
#include <chrono>
#include <memory>
#include <tuple>

#include "actors/scheduler.hpp"
#include "net/timer_service.hpp"

namespace tether {

class actor_timers {
 public:
  actor_timers(net::timer_service* service, caf::actor_addr owner)
      : service_(service), owner_(std::move(owner)) {}
  ~actor_timers() { cancel_all(); }
  actor_timers(const actor_timers&) = delete;
  actor_timers& operator=(const actor_timers&) = delete;

  // Sends `xs...` to the owner after `delay`; returns a handle to cancel it early.
  template <class... Ts>
  std::shared_ptr<net::timer> after(std::chrono::nanoseconds delay, Ts... xs) {
    prune();
    auto t = service_->start(delay, [owner = owner_, args = std::make_tuple(std::move(xs)...)] {
      if (auto a = caf::actor_cast<caf::actor>(owner)) {
        const urgent_delivery first;  // a timer's news is due already
        std::apply([&](const auto&... v) { caf::anon_send(a, v...); }, args);
      }
    });
    pending_.push_back(t);
    return t;
  }

  void cancel_all() {
    for (auto& t : pending_) t->cancel();
    pending_.clear();
  }

 private:
  // Fired or cancelled timers are dropped now and then, so a long stream's idle re-arming does
  // not accumulate handles.
  void prune() {
    if (pending_.size() < 16) return;
    pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                  [](const auto& t) { return t.use_count() == 1; }),
                   pending_.end());
  }

  net::timer_service* service_;
  caf::actor_addr owner_;
  // Inline room for the few an actor has at once (a request's deadline and backoff, an attempt's
  // per-try and idle timers): no allocation for the list itself.
  boost::container::small_vector<std::shared_ptr<net::timer>, 3> pending_;
};

}  // namespace tether
