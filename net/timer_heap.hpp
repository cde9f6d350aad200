// The timer_service's timers of one io_context in one indexed min-heap under a mutex, woken by a
// single Asio timer: arming or cancelling one from any thread is a lock and a heap operation. A
// timer of its own cost far more to start and cancel (a strand, two posts through the io queue,
// Asio's timer queue twice), and every attempt arms one (its timeout).
// Every actor timer is here (the request's deadline and backoff, the attempt's per-try and idle
// timers). With more than one CAF worker, the io thread may wait for this mutex behind workers
// cancelling their timers at teardown: watch the deadline storm when that changes.
// net/-internal: it exposes Asio.
#pragma once

#include <boost/asio/execution_context.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>

#include "net/io_executor.hpp"
#include "net/timer_service.hpp"

namespace tether::net {

class timer_heap final : public boost::asio::execution_context::service {
 public:
  using key_type = timer_heap;
  static inline boost::asio::execution_context::id id;

  explicit timer_heap(boost::asio::execution_context& ctx);
  ~timer_heap() override;

  // The one heap of `io` (created on first use).
  static timer_heap& of(boost::asio::io_context& io);

  // `fire` runs at `when` (steady clock): on `target` if one is given (in the heap's wake when
  // that is the target's own thread, else posted to it), otherwise on the heap's own strand.
  // Thread-safe. The handle cancels (thread-safe, idempotent): once cancel() returns, `fire` will
  // not start unless it already had, and what it captured is released.
  std::shared_ptr<timer> start(std::chrono::steady_clock::time_point when, timer_callback fire,
                               std::optional<io_executor> target = std::nullopt);

  // How many timers are armed (tests).
  std::size_t size() const;
  // Whether a timer is due at `now` and has not fired yet.
  bool due(std::chrono::steady_clock::time_point now) const;

  struct core;

 private:
  void shutdown() override;

  std::shared_ptr<core> core_;
};

}  // namespace tether::net
