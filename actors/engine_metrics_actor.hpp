// The engines' own account of their work: for every upstream with a metrics_path, a GET of it
// every metrics_interval_ms (and sooner when a cut attempt awaits the count), outside the budget,
// bounded by the connect timeout and never retried (the next poll is the retry). What it reads
// (actors/policy/engine/engine_metrics.hpp) becomes tether_engine_requests, and the excess over
// tether's live work on that upstream, once it held for a grace
// (actors/policy/engine/orphan_watch.hpp), tether_engine_orphaned_requests.
#pragma once

#include <caf/all.hpp>

// runtime_ptr travels in a message: health_actor.hpp allows it, once for the process.
#include "actors/health_actor.hpp"
#include "actors/runtime.hpp"

namespace tether {

// The actor's own timer: (engine_poll_atom, upstream, generation); a poll's end:
// (engine_read_atom, upstream, generation, status, whole, body, why).
using engine_poll_atom = caf::atom_constant<caf::atom("epoll")>;
using engine_read_atom = caf::atom_constant<caf::atom("eread")>;
// Its timer for an extra poll for the cut attempts it holds: (engine_soon_atom, upstream,
// generation).
using engine_soon_atom = caf::atom_constant<caf::atom("esoon")>;

// (linger_atom, upstream, closed_ns, due_ns, bound_ns, actor_addr)  a cut attempt that holds its
// slot until the engine's count lets it go (actors/policy/engine/engine_release.hpp): told
// grace_over_atom then.

// (adopt_runtime_atom, runtime_ptr)  a reload's generation: its upstreams' poll settings
caf::behavior engine_metrics_actor(caf::event_based_actor* self, runtime_ptr rt);

}  // namespace tether
