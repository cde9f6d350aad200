// Why a request's attempt tree is stopped from above. The request actor sends it down the tree
// as the exit reason (messages.hpp, stop_error); the connection actor closes its socket whatever
// the reason. The reason decides only where the request's cancel latency counts from (the
// deadline itself for `deadline`) and whether the stop queues behind the other callers' answers
// (request_lifecycle::cancel_attempt, request_actor.cpp). The access line and the trace record
// the request's outcome (deadline_exceeded, client_disconnected, shutting_down), not this reason.
#pragma once

#include <cstdint>

namespace tether {

enum class stop_reason : std::uint8_t {
  deadline = 1,  // the whole-request deadline passed
  client_gone,   // the caller closed its connection
  drain,         // the gateway is shutting down and the drain timeout passed
};

}  // namespace tether
