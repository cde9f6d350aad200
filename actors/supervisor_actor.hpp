// Holds every live request tree, and drains them with gate semantics on shutdown: once draining,
// the gateway admits nothing; in-flight trees run on up to drain_timeout, then are cancelled; the
// drain answers when the last tree (and so its last upstream socket) is gone.
#pragma once

#include <caf/all.hpp>

#include <chrono>

namespace tether {

// (adopt_atom, actor)  a new request actor to hold and watch
// (drain_atom) → (drained_atom, uint64 cancelled)  once no request actor is left
caf::behavior supervisor_actor(caf::event_based_actor* self,
                               std::chrono::milliseconds drain_timeout);

}  // namespace tether
