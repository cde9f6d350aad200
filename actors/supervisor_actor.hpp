// One per io thread: holds every live request tree that thread's callers started, linked, and
// stops them when the drain says so. The drain's clock and its order (the budgets first) are
// the drain actor's (actors/drain_actor.hpp), one for every thread.
#pragma once

#include <caf/all.hpp>

namespace tether {

// (adopt_atom, actor)  a new request actor to link to and hold
// (drain_atom) → (drained_atom, uint64 cancelled)  once no request actor is left
// (drain_now_atom)     stop every request now, with the drain reason
caf::behavior supervisor_actor(caf::event_based_actor* self);

}  // namespace tether
