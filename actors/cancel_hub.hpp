// The upstream exchanges of one request, reachable from the io thread that serves its caller.
// When the caller leaves, that thread closes the request's upstream sockets at once instead of
// waiting for the news to travel io → request → attempt → connection actor → io (four hand-offs,
// each a wake-up on a busy CPU). Nothing else changes: the request actor still decides the
// outcome and cancels its tree, and a budget slot is still freed only by the connection actor's
// exit after net/ reported the socket closed.
// The same thread answers a passed deadline (request_actor.cpp, the channel's run_at callback): the
// caller gets its 504 at the deadline instead of after a trip through a busy actor system. The hub
// says who answers: the first to claim the answer — the request actor, or that deadline.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "net/upstream.hpp"

namespace tether {

class cancel_hub {
 public:
  // Registers a started exchange. false: the caller has already left, and the exchange has been
  // cancelled here.
  bool add(const std::shared_ptr<net::upstream_exchange>& exchange);
  // The caller left: cancels every registered exchange and any added later. Idempotent.
  void cancel_all();
  bool cancelled() const;
  // true for the first caller only: that one answers the caller, nobody else may.
  bool claim_answer() noexcept { return !answer_claimed_.exchange(true); }

 private:
  std::atomic<bool> answer_claimed_{false};
  mutable std::mutex mutex_;
  bool cancelled_ = false;
  // A request's usual exchanges (one, a retry) without an allocation.
  boost::container::small_vector<std::weak_ptr<net::upstream_exchange>, 2> exchanges_;
};

}  // namespace tether
