// A cluster member's way to the shared budget (issue #7). Connection actors send it their
// (acquire_atom, ...) exactly as they would to a local budget; it delegates the message to the
// budget host's actor through CAF's middleman while joined, so the host sees — and monitors — the
// member's connection actor itself: when that actor exits, or the member dies, or the link
// breaks, the host's down_msg frees the slot. While the host is unreachable it delegates to a
// local budget with the same caps, reports tether_cluster_connected 0, and reconnects with backoff.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <string>

#include "actors/metrics.hpp"
#include "net/timer_service.hpp"

namespace tether {

// A link that carries nothing for cluster_silence (no message, no heartbeat) is closed, on both
// ends: a budget host that is alive but cannot be reached (a partition, a frozen process) keeps
// its connection open and says nothing, and without this a member would wait on it forever
// instead of applying its own caps, and the host would keep the member's slots. Heartbeats every
// cluster_heartbeat keep a quiet link from looking silent; the limit leaves a loaded node a few
// missed beats before it is given up.
inline constexpr std::chrono::milliseconds cluster_heartbeat{500};
inline constexpr std::chrono::milliseconds cluster_silence{2000};

caf::behavior budget_link_actor(caf::event_based_actor* self, caf::actor local_budget,
                                std::string host, std::uint16_t port,
                                std::chrono::milliseconds lease_idle, metrics* stats,
                                net::timer_service* timers);

}  // namespace tether
