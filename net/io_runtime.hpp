// The Asio io_context and the one thread that runs it. Created before and destroyed after the
// actor_system, so that no actor outlives the sockets it owns.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

namespace tether::net {

class io_runtime {
 public:
  // One thread of its own runs the context. Never more than one: a connection's handlers run on
  // the context's own executor, with no strand (io_executor.hpp).
  io_runtime();
  // No thread of its own: the context runs on a thread lent to it, which calls run_here()
  // (tether's first CAF worker, so that the io work and the actors' jobs share one thread and
  // hand work to each other without waking anybody).
  struct lent_thread_t {};
  static constexpr lent_thread_t lent_thread{};
  explicit io_runtime(lent_thread_t);
  ~io_runtime();  // stops the context and joins its thread
  io_runtime(const io_runtime&) = delete;
  io_runtime& operator=(const io_runtime&) = delete;

  // The underlying boost::asio::io_context, for net/ only (opaque to everyone else).
  void* native();
  // The runtime whose context the calling thread is running (its own thread's, or the lent
  // thread's inside run_here), or nullptr.
  static io_runtime* current();
  void stop();
  bool stopped() const;
  // Lent mode: runs the context's handlers on the calling thread until stop(); a handler that
  // throws is dropped. Called by one thread at a time; after stop() it returns at once.
  void run_here();
  // Whether a timer of this context's heap is due and has not fired: its wake waits in the
  // queue. For a long run of other work to let it go first. This runtime's thread only.
  bool timers_due();
  // Queues fn(arg) behind the handlers already queued; from any thread.
  void post(void (*fn)(void*), void* arg);
  // Runs `fn` on this runtime's thread, behind the handlers already queued, and waits for it up to
  // `limit`: false when it has not run by then (it still runs later). From outside that thread.
  bool run_and_wait(std::function<void()> fn, std::chrono::milliseconds limit);
  // stop() and wait for its thread (or the lent thread) to leave: after this no handler runs.
  // Idempotent.
  void join();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace tether::net
