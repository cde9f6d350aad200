#include "actors/policy/request/retry_budget.hpp"

#include <algorithm>

namespace tether {

retry_budget::retry_budget(std::size_t upstreams, std::uint32_t min_concurrency,
                           std::uint32_t percent)
    : min_concurrency_(min_concurrency), percent_(percent), per_upstream_(upstreams) {}

void retry_budget::reshape(std::size_t upstreams, std::uint32_t min_concurrency,
                           std::uint32_t percent) {
  std::lock_guard lock{mutex_};
  min_concurrency_ = min_concurrency;
  percent_ = percent;
  if (upstreams > per_upstream_.size()) per_upstream_.resize(upstreams);
}

void retry_budget::request_joined(std::size_t upstream) {
  std::lock_guard lock{mutex_};
  if (upstream < per_upstream_.size()) ++per_upstream_[upstream].requests;
}

void retry_budget::request_left(std::size_t upstream) {
  std::lock_guard lock{mutex_};
  if (upstream < per_upstream_.size() && per_upstream_[upstream].requests > 0)
    --per_upstream_[upstream].requests;
}

std::uint32_t retry_budget::limit_locked(const counts& c) const {
  // Rounded down: 20 % of 4 requests admits no retry beyond the minimum.
  const auto share =
      static_cast<std::uint32_t>(static_cast<std::uint64_t>(c.requests) * percent_ / 100);
  return std::max(min_concurrency_, share);
}

bool retry_budget::try_start_retry(std::size_t upstream) {
  std::lock_guard lock{mutex_};
  if (upstream >= per_upstream_.size()) return false;
  auto& c = per_upstream_[upstream];
  if (c.retries >= limit_locked(c)) return false;
  ++c.retries;
  return true;
}

void retry_budget::retry_ended(std::size_t upstream) {
  std::lock_guard lock{mutex_};
  if (upstream < per_upstream_.size() && per_upstream_[upstream].retries > 0)
    --per_upstream_[upstream].retries;
}

std::uint32_t retry_budget::limit(std::size_t upstream) const {
  std::lock_guard lock{mutex_};
  return upstream < per_upstream_.size() ? limit_locked(per_upstream_[upstream]) : 0;
}

std::uint32_t retry_budget::retries_in_flight(std::size_t upstream) const {
  std::lock_guard lock{mutex_};
  return upstream < per_upstream_.size() ? per_upstream_[upstream].retries : 0;
}

std::uint32_t retry_budget::requests_in_flight(std::size_t upstream) const {
  std::lock_guard lock{mutex_};
  return upstream < per_upstream_.size() ? per_upstream_[upstream].requests : 0;
}

}  // namespace tether
