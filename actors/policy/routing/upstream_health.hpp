// Which upstreams get attempts, from the evidence of every attempt's end: failures in a row eject
// an upstream for a while that doubles on each repeat, a 429's Retry-After cools it down, an
// active check ejects it at once and a passing one returns it. It also tells the router each
// upstream's live work (the budget's own count of this node's open upstream work) and weight.
// One for the process, across reloads (upstreams keep their index); thread-safe: availability is
// read without a lock on every attempt.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

#include "config/config.hpp"

namespace tether {

using steady_time = std::chrono::steady_clock::time_point;

enum class ejection_reason : std::uint8_t { failures, health_check, rate_limited };
std::string_view to_string(ejection_reason r);

struct health_change {
  std::size_t upstream = 0;
  bool ejected = true;  // false: returned to service
  ejection_reason reason = ejection_reason::failures;
  config::millis duration{0};  // an ejection's length (0 for a health check's: until it passes)
  bool remote = false;         // learnt from another node: not to be passed on again
};

class upstream_health {
 public:
  // Told of every ejection and return, outside the lock, on the thread whose evidence caused it.
  using listener = std::function<void(const health_change&)>;

  // Each upstream's open work by index (nullptr: none counted, every upstream reads 0).
  using load_source = std::function<std::int64_t(std::size_t)>;

  explicit upstream_health(load_source load = {}, std::size_t capacity = config::max_upstreams);
  upstream_health(const upstream_health&) = delete;
  upstream_health& operator=(const upstream_health&) = delete;

  // The settings of each upstream by index (at start and at every reload). An upstream whose
  // ejection threshold is now 0 returns to service; a retired one keeps its state.
  void configure(const config::gateway_config& cfg);
  void set_listener(listener l);

  // An attempt's end. `failed`: refused/reset connection, malformed response, 5xx, attempt
  // timeout; a success is any response (2xx, 4xx) or a stream's first event.
  void attempt_succeeded(std::size_t upstream);
  void attempt_failed(std::size_t upstream, steady_time now);
  // A 429 with Retry-After: no attempt for that long (capped at eject_max).
  void rate_limited(std::size_t upstream, config::millis retry_after, steady_time now);
  void check_passed(std::size_t upstream, steady_time now);
  void check_failed(std::size_t upstream, steady_time now);
  // Another node's ejection (a cluster): kept here as if decided here, until `until`.
  void eject_remotely(std::size_t upstream, ejection_reason reason, steady_time until,
                      steady_time now);
  // Ejections and cooldowns over by `now` are announced as returns; returns when the next one
  // ends (nullopt: none pending).
  std::optional<steady_time> sweep(steady_time now);

  bool available(std::size_t upstream, steady_time now) const;
  // When the upstream takes attempts again: now or earlier if available, max() while a health
  // check fails.
  steady_time available_at(std::size_t upstream) const;
  std::uint32_t weight(std::size_t upstream) const;

  std::int64_t live_work(std::size_t upstream) const;

 private:
  struct settings {
    std::uint32_t weight = 1;
    std::uint32_t eject_after = 5;
    config::millis base{5000};
    config::millis max{300000};
  };
  struct state {
    settings conf;
    std::uint32_t streak = 0;     // consecutive failed attempts
    std::uint32_t ejections = 0;  // repeats so far: the next ejection is base << ejections
    steady_time ejected_until{};  // failures / health check / remote
    steady_time cooldown_until{};
    bool check_failing = false;
    bool announced_out = false;  // an ejection was announced and its return not yet
    ejection_reason reason = ejection_reason::failures;
  };
  struct slot {
    std::atomic<std::int64_t> blocked_until_ns{0};
    std::atomic<std::uint32_t> weight{1};
  };

  // Runs `f(state&, changes&)` on one upstream under the lock, then tells the changes outside it.
  template <class F>
  void change(std::size_t upstream, F&& f);
  void eject(std::size_t upstream, state& s, ejection_reason reason, steady_time now,
             steady_time until, config::millis duration, std::vector<health_change>& out);
  // An upstream announced out and no longer blocked is announced back.
  static void return_if_back(std::size_t upstream, state& s, steady_time now,
                             std::vector<health_change>& out);
  static bool blocked(const state& s, steady_time now);
  void publish(std::size_t upstream, const state& s);
  void tell(const std::vector<health_change>& changes);
  bool valid(std::size_t upstream) const { return upstream < capacity_; }

  load_source load_;
  std::size_t capacity_;
  std::unique_ptr<slot[]> slots_;  // read without the lock
  mutable std::mutex mu_;
  std::vector<state> states_;  // guarded by mu_
  listener listener_;          // guarded by mu_ (copied out to call)
};

}  // namespace tether
