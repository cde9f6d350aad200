#include "actors/policy/request/call_table.hpp"

#include <algorithm>

namespace tether {

std::optional<outcome> call_table::verdict::spent(std::uint32_t max_retries) const {
  if (!last || attempts < max_retries + 1) return std::nullopt;
  if (*last != outcome::upstream_failed && *last != outcome::upstream_timeout &&
      *last != outcome::upstream_rate_limited)
    return std::nullopt;
  return last;
}

call_table::verdict call_table::admit(std::uint64_t id, steady_time now) {
  std::lock_guard lock{mutex_};
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return {};
  const entry& e = *it->second;
  if (now > e.window_end) {
    // Its window closed: this is a new call of the same shape.
    order_.erase(it->second);
    by_id_.erase(it);
    return {};
  }
  return {e.tries + 1, e.due, e.attempts, e.last};
}

std::uint64_t call_table::ended(std::uint64_t id, bool ok, std::optional<steady_time> due,
                                std::uint32_t try_number, steady_time now, millis window,
                                std::uint32_t attempts, std::optional<outcome> how) {
  std::lock_guard lock{mutex_};
  auto it = by_id_.find(id);
  if (ok || window.count() <= 0 || capacity_ == 0) {
    // An ok ends the call: the same request again is a new one.
    if (it != by_id_.end()) {
      order_.erase(it->second);
      by_id_.erase(it);
    }
    return 0;
  }
  if (it != by_id_.end()) {
    // Another try of the same call ended first: the call keeps the earlier deadline and the
    // higher count, adds this try's attempts to its own, and its window runs from this end.
    entry& e = *it->second;
    if (!e.due || (due && *due < *e.due)) e.due = due;
    e.tries = std::max(e.tries, try_number);
    e.attempts += attempts;
    e.last = how;
    e.window_end = now + window;
    order_.splice(order_.end(), order_, it->second);
    return 0;
  }
  order_.push_back(entry{id, due, try_number, attempts, how, now + window});
  by_id_.emplace(id, std::prev(order_.end()));
  const auto before = evictions_;
  trim(now, true);
  return evictions_ - before;
}

void call_table::trim(steady_time now, bool count) {
  while (order_.size() > capacity_) {
    const entry& oldest = order_.front();
    if (count && oldest.window_end >= now) ++evictions_;
    by_id_.erase(oldest.id);
    order_.pop_front();
  }
}

void call_table::set_capacity(std::size_t capacity) {
  std::lock_guard lock{mutex_};
  capacity_ = capacity;
  trim(steady_time{}, false);
}

std::size_t call_table::size() const {
  std::lock_guard lock{mutex_};
  return by_id_.size();
}

std::uint64_t call_table::evictions() const {
  std::lock_guard lock{mutex_};
  return evictions_;
}

}  // namespace tether
