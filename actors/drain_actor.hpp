// The drain's one clock, for every io thread's supervisor: once draining, in-flight trees run on
// up to drain_timeout, then every thread's are stopped at once, the budgets told first.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <vector>

#include "net/timer_service.hpp"

namespace tether {

// (drain_atom) → (drained_atom, uint64 cut_short)  asks every supervisor to drain; answers once
//                      all of them have, with the requests still alive on every thread when
//                      the drain's end came (0 if every request ended in time)
// (drain_now_atom)     the drain's end now (the drain timeout sends it too, or a second signal):
//                      every one of `budgets` (this node's budget actor, or its link, and its io
//                      threads' budget shards) is told first and refuses this node's work; then
//                      every supervisor stops its trees
caf::behavior drain_actor(caf::event_based_actor* self, std::chrono::milliseconds drain_timeout,
                          std::vector<caf::actor> budgets, std::vector<caf::actor> supervisors,
                          net::timer_service* timers);

}  // namespace tether
