// The tokens an upstream generated for nobody (contract: "The ledger": waste): after the caller
// left mid-stream, until the upstream's work ended (§6: the socket closed and, with an engine's
// metrics, the engine let go). No upstream reports them, so they are estimated from the stream's
// own pace: the tokens relayed over the time they took. A decode step that had begun when the
// caller left runs to its end, so a part of one counts as one.
#pragma once

#include <cstdint>

namespace tether::ledger {

// Times in nanoseconds on one clock: the stream's first byte, the caller's leaving, the work's
// end. Zero when the caller did not leave mid-stream (no token relayed before it left, or the
// work had ended already).
std::uint64_t waste_tokens(std::int64_t first_byte_ns, std::int64_t caller_left_ns,
                           std::int64_t work_ended_ns, std::uint64_t relayed_tokens);

}  // namespace tether::ledger
