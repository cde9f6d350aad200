#include "net/upstream_pool.hpp"

#include <utility>
#include <vector>

namespace tether::net {

upstream_pool::upstream_pool(asio::io_context& io, std::size_t max_idle,
                             std::chrono::milliseconds idle_timeout)
    : max_idle_(max_idle),
      idle_timeout_(idle_timeout),
      strand_(asio::make_strand(io)),
      sweep_timer_(strand_) {}

std::shared_ptr<upstream_connection> upstream_pool::take() {
  std::vector<std::shared_ptr<upstream_connection>> expired;
  std::shared_ptr<upstream_connection> found;
  {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard lock(mutex_);
    while (!idle_.empty()) {
      auto candidate = std::move(idle_.back());
      idle_.pop_back();
      if (now - candidate->idle_since < idle_timeout_ && candidate->reusable()) {
        found = std::move(candidate);
        break;
      }
      expired.push_back(std::move(candidate));
    }
  }
  for (auto& c : expired) c->close();
  return found;
}

void upstream_pool::park(std::shared_ptr<upstream_connection> connection) {
  connection->idle_since = std::chrono::steady_clock::now();
  std::shared_ptr<upstream_connection> evicted;
  bool arm = false;
  {
    std::lock_guard lock(mutex_);
    if (shut_ || max_idle_ == 0) {
      evicted = std::move(connection);
    } else {
      if (idle_.size() >= max_idle_) {
        // The oldest idle connection is the likeliest to have been dropped by the server.
        evicted = std::move(idle_.front());
        idle_.pop_front();
      }
      idle_.push_back(std::move(connection));
      arm = !sweep_armed_;
      sweep_armed_ = true;
    }
  }
  if (evicted) evicted->close();
  if (arm) arm_sweep();
}

std::size_t upstream_pool::size() const {
  std::lock_guard lock(mutex_);
  return idle_.size();
}

void upstream_pool::shut() {
  std::deque<std::shared_ptr<upstream_connection>> closing;
  {
    std::lock_guard lock(mutex_);
    shut_ = true;
    closing.swap(idle_);
  }
  for (auto& c : closing) c->close();
  asio::post(strand_, [self = shared_from_this()] { self->sweep_timer_.cancel(); });
}

void upstream_pool::arm_sweep() {
  // The timer is not thread-safe; only the pool's strand touches it. A weak reference lets the
  // pool go away while a sweep is pending.
  asio::dispatch(strand_, [weak = weak_from_this()] {
    auto self = weak.lock();
    if (!self) return;
    std::chrono::steady_clock::time_point next;
    {
      std::lock_guard lock(self->mutex_);
      if (self->idle_.empty() || self->shut_) {
        self->sweep_armed_ = false;
        return;
      }
      next = self->idle_.front()->idle_since + self->idle_timeout_;
    }
    self->sweep_timer_.expires_at(next);
    self->sweep_timer_.async_wait([weak](boost::system::error_code ec) {
      if (ec) return;
      if (auto self = weak.lock()) self->sweep();
    });
  });
}

void upstream_pool::sweep() {
  std::vector<std::shared_ptr<upstream_connection>> expired;
  {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard lock(mutex_);
    while (!idle_.empty() && now - idle_.front()->idle_since >= idle_timeout_) {
      expired.push_back(std::move(idle_.front()));
      idle_.pop_front();
    }
  }
  for (auto& c : expired) c->close();
  arm_sweep();
}

}  // namespace tether::net
