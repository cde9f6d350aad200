// One per io thread: holds every live request tree that thread's callers started, linked through
// cells of a bounded size (supervisor_actor.cpp says why), and stops them when the drain says so.
// The drain's clock and its order (the budgets first) are the drain actor's
// (actors/drain_actor.hpp), one for every thread.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <memory>

namespace tether {

struct supervisor_state;

// adopt_request(supervisor, actor)  a new request actor, linked and held (below)
// (drain_atom) → (drained_atom, uint64 cut_short)  once no request actor is left; cut_short:
//                      the requests still alive when drain_now came
// (drain_now_atom)     stop every request now, with the drain reason
// A class, spawned as system.spawn<supervisor_actor>(): CAF 0.17 dereferences a null pointer to
// the empty argument tuple of a function-based actor spawned without arguments (UBSan says so).
class supervisor_actor : public caf::event_based_actor {
 public:
  explicit supervisor_actor(caf::actor_config& cfg);
  caf::behavior make_behavior() override;

  // Safe from any thread: the live set has a lock, and CAF's link takes both actors' locks.
  void adopt(caf::actor req);
  // Requests adopted and not yet ended; safe from any thread.
  std::uint64_t live() const;

 private:
  std::shared_ptr<supervisor_state> st_;
};

// Links `req` to `supervisor` (a handle spawned as supervisor_actor in this process) and holds
// it, on the thread that spawned `req`. A request's end still reaches its cell through the link;
// only the start is not a message, since an adopt message woke the supervisor once more for every
// request.
void adopt_request(const caf::actor& supervisor, caf::actor req);

// supervisor_actor::live() of `supervisor` (a handle spawned as supervisor_actor in this process).
std::uint64_t live_requests(const caf::actor& supervisor);

}  // namespace tether
