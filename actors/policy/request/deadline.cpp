#include "actors/policy/request/deadline.hpp"

#include <algorithm>
#include <limits>
#include <string>

namespace tether {

caller_budget parse_caller_budget(const std::string* header_value) {
  if (header_value == nullptr) return {};
  std::string_view v = *header_value;
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  if (v.empty()) return {caller_budget::kind::invalid, millis{0}};
  // Saturate well below the rep's limit so that later additions to time_points cannot overflow.
  constexpr std::int64_t cap = std::numeric_limits<std::int64_t>::max() / 4'000'000;
  std::int64_t value = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return {caller_budget::kind::invalid, millis{0}};
    if (value < cap) value = std::min<std::int64_t>(cap, value * 10 + (c - '0'));
  }
  return {caller_budget::kind::valid, millis{value}};
}

std::optional<millis> effective_deadline(millis configured, const caller_budget& caller) {
  std::optional<millis> result;
  if (configured.count() > 0) result = configured;
  if (caller.what == caller_budget::kind::valid) {
    result = result ? std::min(*result, caller.value) : caller.value;
  }
  return result;
}

std::optional<millis> request_deadline::remaining(steady_time now) const {
  if (!budget_) return std::nullopt;
  // Rounded up: what is passed on as "remaining" must never exceed what truly remains.
  auto elapsed = std::chrono::ceil<millis>(now - arrival_);
  return std::max(millis{0}, *budget_ - elapsed);
}

bool request_deadline::expired(steady_time now) const {
  return budget_ && now - arrival_ >= *budget_;
}

std::optional<millis> request_deadline::forwarded(steady_time now) const {
  auto left = remaining(now);
  if (!left) return std::nullopt;
  return std::max(millis{0}, *left - propagation_margin);
}

// remaining() counts elapsed time rounded up: an upstream told `forwarded(start)` at `start` can
// only answer when at most the margin is left here, whatever the sub-millisecond remainders.
bool request_deadline::within_margin(steady_time now) const {
  auto left = remaining(now);
  return left && *left <= propagation_margin;
}

millis request_deadline::attempt_timer(millis attempt_timeout, steady_time now) const {
  if (attempt_timeout.count() <= 0) return millis{0};
  auto left = remaining(now);
  if (left && *left <= attempt_timeout) return millis{0};
  return attempt_timeout;
}

}  // namespace tether
