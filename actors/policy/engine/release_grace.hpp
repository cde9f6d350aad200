// How long a cancelled attempt's budget slot (and token weight) is held after tether closed its
// upstream connection (contract: "The budget holds until the engine has let go"). A model server
// notices the close only when it writes to the connection, so it goes on decoding the abandoned
// request; a slot freed at the close lets the next request in to wait inside the engine. The
// first write after the close still succeeds (the peer's reset comes back to it), the second
// fails and the engine cancels, and the slot is free at the end of the step in progress: up to
// three decode steps. So the slot is held for three of the deployment's observed decode steps
// plus a scheduling slack, bounded by its release_grace_max_ms; before any step was observed,
// for the bound.
//
// Only where the engine may still be working: an upstream with an engine named (openai is
// nothing engine-specific, and its slot goes back at the close as it always did), a connection
// that held its slot and sent its request, and an exchange tether cut (the caller left, the
// deadline, the drain, an attempt or idle timeout) rather than one whose answer ended.
#pragma once

#include <chrono>
#include <optional>

namespace tether {

struct release_facts {
  bool engine_named = false;  // the upstream's engine is not "openai"
  bool held_slot = false;
  bool request_sent = false;  // the connection was made: the request went out
  bool cut = false;           // closed by tether before the answer's end
};

// The decode steps after the close within which the engine has let go, and the slack for the
// scheduling of its threads and ours (the same 50 ms as the contract's bound on the work's end).
inline constexpr int grace_steps = 3;
inline constexpr std::chrono::milliseconds grace_slack{50};

// 0: release at the close.
std::chrono::nanoseconds release_grace(const release_facts& facts,
                                       std::optional<std::chrono::nanoseconds> observed_step,
                                       std::chrono::milliseconds max);

}  // namespace tether
