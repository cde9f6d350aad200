// Timers on a clock the test advances by hand, for actors under CAF's test coordinator: the
// tests run every timer the actors arm (net::timer_service) on the test's thread, in due order.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "net/timer_service.hpp"

namespace tether {

// Timers on the test's own clock: nothing fires until advance() passes its due time.
class manual_timers final : public net::timer_service {
 public:
  std::shared_ptr<net::timer> start(std::chrono::nanoseconds delay,
                                    net::timer_callback fire) override {
    auto e = std::make_shared<entry>();
    e->due = now_ + delay;
    e->fire = std::move(fire);
    pending_.push_back(e);
    return e;
  }

  std::chrono::nanoseconds now() const override { return now_; }

  // Moves the clock on by `by`, firing what falls due, earliest first.
  void advance(std::chrono::nanoseconds by) {
    const auto until = now_ + by;
    for (;;) {
      auto next = std::min_element(pending_.begin(), pending_.end(),
                                   [](const auto& a, const auto& b) { return a->due < b->due; });
      if (next == pending_.end() || (*next)->due > until) break;
      auto e = *next;
      pending_.erase(next);
      now_ = std::max(now_, e->due);
      if (!e->cancelled) e->fire();
    }
    now_ = until;
  }

  // Armed and neither fired nor cancelled.
  std::size_t armed() const {
    return static_cast<std::size_t>(std::count_if(pending_.begin(), pending_.end(),
                                                  [](const auto& e) { return !e->cancelled; }));
  }

 private:
  struct entry final : net::timer {
    void cancel() override { cancelled = true; }
    std::chrono::nanoseconds due{0};
    net::timer_callback fire;
    bool cancelled = false;
  };
  std::chrono::nanoseconds now_{0};
  std::vector<std::shared_ptr<entry>> pending_;
};

}  // namespace tether
