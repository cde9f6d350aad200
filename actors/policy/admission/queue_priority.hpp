// Where a request waits in its key's admission queue: its priority class (the caller's
// X-Priority, capped at what its key may ask for), then its arrival. The fair queue
// (slot_book) serves keys in turn and, within a key, the smallest rank first.
#pragma once

#include <cstdint>
#include <string>

#include "config/priority.hpp"

namespace tether {

struct asked_priority {
  priority value = priority::normal;
  bool valid = true;  // false: the header names no class (the caller is told so: 400)
};

// The class a request waits in: `header` (nullptr when absent) lowered to `max`; no header is
// normal, lowered to `max` too (a key whose max is low waits as low).
asked_priority priority_of(const std::string* header, priority max);

// One number ordering a key's waiters by (class, arrival): the rank every hop of a slot's ask
// carries (the budget, a cluster member's leases), so a retry keeps its request's place. Arrival
// is wall-clock nanoseconds (comparable across nodes), kept to the microsecond.
std::int64_t queue_rank(priority p, std::int64_t arrival_wall_ns);

}  // namespace tether
