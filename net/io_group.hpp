// The io runtimes a gateway serves on, one per io thread (server.threads): each is lent to one
// CAF worker, owns its share of the callers' connections and its own upstream connections and
// timers, so that a request's sockets, timers and actors stay on the thread that serves its
// caller. Member 0 also carries the process-wide work (the listener, the trace exporter).
// Non-owning: the runtimes outlive every group that names them.
#pragma once

#include <cstddef>
#include <vector>

#include "net/io_runtime.hpp"

namespace tether::net {

class io_group {
 public:
  // A group of one (tests, tools): implicit, so that an io_runtime goes where a group is asked.
  io_group(io_runtime& one);  // NOLINT(google-explicit-constructor)
  // Not empty.
  explicit io_group(std::vector<io_runtime*> members);

  std::size_t size() const { return members_.size(); }
  io_runtime& at(std::size_t i) const { return *members_[i]; }
  // The member the calling thread runs, else 0 (a thread outside the group: main, CAF's).
  std::size_t here() const;

 private:
  std::vector<io_runtime*> members_;
};

}  // namespace tether::net
