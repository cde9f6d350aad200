// Holds every live request tree, linked, and drains them with gate semantics on shutdown: once
// draining, the gateway admits nothing; in-flight trees run on up to drain_timeout, then are
// stopped with the drain reason; the drain answers when the last tree (and so its last upstream
// socket) is gone.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <vector>

#include "net/timer_service.hpp"

namespace tether {

// (adopt_atom, actor)  a new request actor to link to and hold
// (drain_atom) → (drained_atom, uint64 cancelled)  once no request actor is left
// (drain_now_atom)     stop every request now (the drain timeout, or a second signal); `budgets`
//                      (this node's budget actor, or its link, and its io threads' budget shards)
//                      are told first, and refuse this node's work
caf::behavior supervisor_actor(caf::event_based_actor* self,
                               std::chrono::milliseconds drain_timeout,
                               std::vector<caf::actor> budgets, net::timer_service* timers);

}  // namespace tether
