// Idle keep-alive connections towards one upstream. Exchanges on any io thread park and take
// connections, so the list is behind a mutex; a sweep timer on the pool's own strand closes
// connections that stayed idle past idle_timeout.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>

#include <boost/asio/strand.hpp>

#include "net/upstream_connection.hpp"

namespace tether::net {

class upstream_pool : public std::enable_shared_from_this<upstream_pool> {
 public:
  upstream_pool(asio::io_context& io, std::size_t max_idle, std::chrono::milliseconds idle_timeout);

  // The most recently parked connection that has not expired and that the upstream has not
  // closed, or nullptr.
  std::shared_ptr<upstream_connection> take();

  // Keeps an idle connection (no operation pending on it) for a later exchange; closes it
  // instead when the pool is full or shut.
  void park(std::shared_ptr<upstream_connection> connection);

  std::size_t size() const;

  // Closes every idle connection and refuses new ones (the upstream_client is going away).
  void shut();

 private:
  void arm_sweep();
  void sweep();

  const std::size_t max_idle_;
  const std::chrono::milliseconds idle_timeout_;
  asio::strand<asio::io_context::executor_type> strand_;
  asio::steady_timer sweep_timer_;  // touched on strand_ only

  mutable std::mutex mutex_;
  std::deque<std::shared_ptr<upstream_connection>> idle_;  // oldest first
  bool sweep_armed_ = false;
  bool shut_ = false;
};

}  // namespace tether::net
