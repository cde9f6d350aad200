// The single owner of concurrency: global, per-upstream and per-key caps, and the admission queue.
// A slot is held by an upstream connection actor and released only by that actor's down_msg —
// which it sends by exiting after its socket is closed — so the count is of real work, never of
// callers still waiting (seed 002: a capacity-1 semaphore with two live workers).
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <vector>

#include "actors/runtime.hpp"

namespace tether {

struct budget_limits {
  std::uint32_t global = 512;
  std::vector<std::uint32_t> per_upstream;
  std::vector<std::uint32_t> per_key;  // 0 = no cap
  std::uint32_t queue_max = 2048;
  std::chrono::milliseconds queue_timeout{0};
};

budget_limits budget_limits_from(const config::gateway_config& cfg);

using holders_atom = caf::atom_constant<caf::atom("holders")>;

// Protocol: (acquire_atom, upstream: uint64, key: int64 (-1 = none), priority: int64) from the
// connection actor; answered later with (grant_atom, granted: bool, reason: string) sent to it.
// (slots_atom) → the number of slots held (for drain's leak report).
// (holders_atom) → (vector<actor> holders, vector<uint64> upstreams, vector<int64> keys): who holds
// a slot now (a cluster member that rejoins its budget host registers them there).
caf::behavior budget_actor(caf::event_based_actor* self, budget_limits limits, metrics* stats);

}  // namespace tether
