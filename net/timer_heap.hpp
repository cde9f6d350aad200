// The timer_service's timers of one io_context in one indexed min-heap under a mutex, woken by a
// single Asio timer: arming or cancelling one from any thread is a lock and a heap operation. A
// timer of its own cost far more to start and cancel (a strand, two posts through the io queue,
// Asio's timer queue twice), and every attempt arms one (its timeout).
// The request deadline stays on the caller's connection (now that connection's own timer,
// downstream_session::run_at): on this heap too it saved a few more instructions per request, but
// the deadline storm's answers and upstream closes came later. Not explained; a guess is that at
// the storm the io thread waits for this mutex behind CAF workers (nice +5) that hold it while
// cancelling their timers at teardown. net/-internal: it exposes Asio.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>

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

  // `fire` runs at `when` (steady clock): posted to `target` if one is given, otherwise on the
  // heap's own strand. Thread-safe. The handle cancels (thread-safe, idempotent): once cancel()
  // returns, `fire` will not start unless it already had, and what it captured is released.
  std::shared_ptr<timer> start(std::chrono::steady_clock::time_point when,
                               std::function<void()> fire,
                               std::optional<boost::asio::any_io_executor> target = std::nullopt);

  // How many timers are armed (tests).
  std::size_t size() const;

  struct core;

 private:
  void shutdown() override;

  std::shared_ptr<core> core_;
};

}  // namespace tether::net
