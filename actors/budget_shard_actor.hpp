// One io thread's share of the budget (issue #27). That thread's connection actors ask it for
// their slots exactly as they would ask the budget actor, and it holds the slots as leases from
// the one budget actor (lease_book), which still counts every leased slot against the caps. A
// slot whose work ended stays with the shard, so the next request on the thread takes it with no
// message to the budget: the budget, which every thread shares and which runs one message at a
// time, is asked only when a shard runs dry, and the cap stays exact. While anyone waits at the
// budget, it recalls the shards' idle slots and its queue decides who goes next.
//
// The shard monitors each connection actor it answers: that actor's down_msg, sent when it exits
// after its socket has closed, is what frees the slot, here as at the budget.
#pragma once

#include <caf/all.hpp>

#include "actors/metrics.hpp"

namespace tether {

// Protocol: (acquire_atom, upstream, key, rank, tokens) from a connection actor, answered later
// with (grant_atom, refusal, reason), as by budget_actor; (lease_grant_atom, ...) and
// (recall_atom, on, scope, index) from the budget; (drain_now_atom), from the supervisor at the
// drain's end: this shard's waiters are refused, and so are its later asks, and its idle slots go
// back; (slots_atom) → the slots at work through this shard. `stats` gets the work and queue gauges
// of the slots granted here (the budget counts leases as another's work).
caf::behavior budget_shard_actor(caf::event_based_actor* self, caf::actor budget, metrics* stats);

}  // namespace tether
