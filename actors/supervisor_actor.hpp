// Holds every live request tree, linked, and drains them with gate semantics on shutdown: once
// draining, the gateway admits nothing; in-flight trees run on up to drain_timeout, then are
// stopped with the drain reason; the drain answers when the last tree (and so its last upstream
// socket) is gone.
#pragma once

#include <caf/all.hpp>

#include <chrono>

#include "net/timer_service.hpp"

namespace tether {

// (adopt_atom, actor)  a new request actor to link to and hold
// (drain_atom) → (drained_atom, uint64 cancelled)  once no request actor is left
// (drain_now_atom)     stop every request now (the drain timeout, or a second signal); `budget`
//                      (this node's budget actor) is told first, and refuses this node's work
caf::behavior supervisor_actor(caf::event_based_actor* self,
                               std::chrono::milliseconds drain_timeout, caf::actor budget,
                               net::timer_service* timers);

}  // namespace tether
