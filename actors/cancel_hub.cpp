#include "actors/cancel_hub.hpp"

#include <algorithm>

namespace tether {

bool cancel_hub::add(const std::shared_ptr<net::upstream_exchange>& exchange) {
  {
    std::lock_guard lock{mutex_};
    if (!cancelled_) {
      // Earlier attempts' exchanges are gone by the time a retry starts: prune, so a long chain
      // of retries does not grow the list.
      exchanges_.erase(std::remove_if(exchanges_.begin(), exchanges_.end(),
                                      [](const auto& e) { return e.expired(); }),
                       exchanges_.end());
      exchanges_.push_back(exchange);
      return true;
    }
  }
  exchange->cancel();
  return false;
}

void cancel_hub::cancel_all() {
  decltype(exchanges_) to_cancel;
  {
    std::lock_guard lock{mutex_};
    if (cancelled_) return;
    cancelled_ = true;
    to_cancel = std::move(exchanges_);
    exchanges_.clear();
  }
  // Outside the lock: cancel() posts to the exchange's strand and returns.
  for (const auto& weak : to_cancel) {
    if (auto e = weak.lock()) e->cancel();
  }
}

bool cancel_hub::cancelled() const {
  std::lock_guard lock{mutex_};
  return cancelled_;
}

}  // namespace tether
