// The Asio io_context and its threads. Created before and destroyed after the actor_system, so
// that no actor outlives the sockets it owns (design notes §3).
#pragma once

#include <memory>

namespace tether::net {

class io_runtime {
 public:
  explicit io_runtime(unsigned threads = 1);
  ~io_runtime();  // stops the context and joins the threads
  io_runtime(const io_runtime&) = delete;
  io_runtime& operator=(const io_runtime&) = delete;

  // The underlying boost::asio::io_context, for net/ only (opaque to everyone else).
  void* native();
  void stop();
  // stop() and wait for the threads to leave: after this no handler runs. Idempotent.
  void join();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace tether::net
