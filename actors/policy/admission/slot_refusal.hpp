// Why a budget (or a budget shard, or a cluster member's link) answered an ask for a slot with
// no: the caller is told an overloaded 503 for the first two, a shutting_down one for the last;
// only `too_heavy` lets the request go on elsewhere (another deployment, its fallbacks).
#pragma once

#include <cstdint>

namespace tether {

enum class slot_refusal : std::int32_t {
  none = 0,   // granted
  no_room,    // the queue is full or the wait limit passed
  stopping,   // this node's drain has ended: it takes no more work
  too_heavy,  // the claim's token weight is more than its upstream's whole token cap: never fits
};

}  // namespace tether
