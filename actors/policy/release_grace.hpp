// How long a cancelled attempt's budget slot (and token weight) is held after tether closed its
// upstream connection (contract: "The budget holds until the engine has let go"). A model server
// notices the close only at its next token write, so it goes on decoding the abandoned request
// for a step or two; a slot freed at the close lets the next request in to wait inside the
// engine. The slot is therefore held for two of the deployment's observed decode steps, bounded
// by its release_grace_max_ms; before any step was observed, for the bound.
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

// 0: release at the close.
std::chrono::nanoseconds release_grace(const release_facts& facts,
                                       std::optional<std::chrono::nanoseconds> observed_step,
                                       std::chrono::milliseconds max);

}  // namespace tether
