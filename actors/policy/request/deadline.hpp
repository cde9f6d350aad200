// Deadline arithmetic for one request: the configured ceiling, the caller's own budget from
// X-Request-Deadline-Ms, and what is left at a given moment. Pure: tests drive it with any clock.
#pragma once

#include <chrono>
#include <optional>
#include <string_view>

namespace tether {

using millis = std::chrono::milliseconds;
using steady_time = std::chrono::steady_clock::time_point;

// A bounded request tells its upstream to give up this much sooner than itself
// (X-Request-Deadline-Ms), and an upstream's failure that reaches it with no more than this left
// is the deadline's: a chained gateway's own 504 then always arrives inside the margin, so the
// caller gets deadline_exceeded whichever of the two gateways' timers fires first.
inline constexpr millis propagation_margin{10};

// The caller's budget header, parsed. Saturates instead of wrapping: a value too large to
// represent is simply longer than any ceiling (contract, request headers).
struct caller_budget {
  enum class kind { absent, valid, invalid } what = kind::absent;
  millis value{0};
};
caller_budget parse_caller_budget(const std::string* header_value);

// The effective whole-request deadline: the configured one (0 = off) shortened, never lengthened,
// by the caller's. nullopt = unbounded.
std::optional<millis> effective_deadline(millis configured, const caller_budget& caller);

class request_deadline {
 public:
  request_deadline(steady_time arrival, std::optional<millis> budget)
      : arrival_(arrival), budget_(budget) {}

  bool bounded() const { return budget_.has_value(); }
  std::optional<millis> budget() const { return budget_; }
  // The moment the budget is spent, exact (no rounding): what the deadline timer is armed for.
  // nullopt when unbounded.
  std::optional<steady_time> due() const {
    if (!budget_) return std::nullopt;
    return arrival_ + *budget_;
  }
  // Time left at `now`, floored at 0; nullopt when unbounded.
  std::optional<millis> remaining(steady_time now) const;
  bool expired(steady_time now) const;
  // What an attempt starting at `now` passes on as X-Request-Deadline-Ms: what is left less the
  // propagation margin, floored at 0; nullopt when unbounded.
  std::optional<millis> forwarded(steady_time now) const;
  // Whether an upstream's failure seen at `now` is the deadline's: bounded, and no more than the
  // propagation margin left (whole ms, as `remaining` counts them).
  bool within_margin(steady_time now) const;
  // The attempt timer to arm for an attempt starting at `now`; 0 = none. An attempt timeout that
  // would not end before the request's deadline is not armed: the deadline ends the attempt, and
  // the outcome is then deadline_exceeded, not a race between two timers due at the same moment.
  millis attempt_timer(millis attempt_timeout, steady_time now) const;

 private:
  steady_time arrival_;
  std::optional<millis> budget_;
};

}  // namespace tether
