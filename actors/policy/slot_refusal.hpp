// Why a budget (or a budget shard, or a cluster member's link) answered an ask for a slot with
// no: the caller is told an overloaded 503 for the first, a shutting_down one for the second.
#pragma once

#include <cstdint>

namespace tether {

enum class slot_refusal : std::int32_t {
  none = 0,  // granted
  no_room,   // the queue is full, the wait limit passed, or no cap could ever hold the claim
  stopping,  // this node's drain has ended: it takes no more work
};

}  // namespace tether
