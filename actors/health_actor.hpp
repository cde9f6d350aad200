// The upstreams' health over time: it announces each ejection and return (log line, metric),
// wakes when an ejection ends, and runs the active checks (a GET of health_path every
// health_interval_ms, bounded by the connect timeout, never through the budget). The decisions
// are upstream_health's; this actor carries out the timing and the probes, and trades ejections
// with the rest of a cluster through the node's budget (actors/budget_actor.hpp).
#pragma once

#include <caf/all.hpp>

#include "actors/runtime.hpp"

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tether::runtime_ptr)

namespace tether {

// (adopt_runtime_atom, runtime_ptr)  a reload's generation: its upstreams' check settings
// (health_news_atom, upstream name, reason, remaining_ms)  another node's ejection
caf::behavior health_actor(caf::event_based_actor* self, runtime_ptr rt);

}  // namespace tether
