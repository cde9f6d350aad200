// What an http_server shares with its listeners and sessions, which may outlive it by a few
// handlers: the limits, the handler, the set of live sessions and the drain / close flags.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "net/downstream.hpp"

namespace tether::net {

class downstream_session;

// Live sessions (those with an open socket); counts them for max_connections.
class session_registry {
 public:
  // Adds unless `max` sessions are already live or the server closed everything.
  bool try_add(const std::shared_ptr<downstream_session>& session, std::size_t max);
  void remove(const downstream_session* session);
  std::size_t size() const;
  std::vector<std::shared_ptr<downstream_session>> snapshot() const;
  // From now on try_add refuses.
  void close();

 private:
  mutable std::mutex mutex_;
  bool closed_ = false;
  std::unordered_map<const downstream_session*, std::weak_ptr<downstream_session>> sessions_;
};

struct server_context {
  server_context(server_limits l, request_handler h) : limits(l), handler(std::move(h)) {}

  // Runs `call` unless the server was destroyed. The handler and the observers belong to the
  // server's owner, who may tear them down right after ~http_server: the destructor waits for
  // calls in progress (on io threads, never blocking one) and later ones are dropped.
  template <class F>
  bool with_owner(F&& call) {
    std::shared_lock lock(owner_mutex_);
    if (owner_gone_) return false;
    std::forward<F>(call)();
    return true;
  }
  void owner_gone() {
    std::unique_lock lock(owner_mutex_);
    owner_gone_ = true;
  }

  const server_limits limits;
  const request_handler handler;
  session_registry sessions;
  std::atomic<bool> draining{false};
  // Accepts that failed (out of descriptors or memory) and were retried after a pause.
  std::atomic<std::uint64_t> accept_failures{0};

 private:
  std::shared_mutex owner_mutex_;
  bool owner_gone_ = false;
};

}  // namespace tether::net
