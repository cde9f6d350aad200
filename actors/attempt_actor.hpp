// One try at one deployment. Owns the per-try timeout (from the slot's grant until the response
// is committed: the whole body, or the first whole SSE event of a stream) and the stream idle
// timeout; reports facts up to the request actor and never decides a retry (Envoy's router
// split). Its exit, with the request's stop reason, takes its connection actor down.
#pragma once

#include <caf/all.hpp>

#include <chrono>

#include "actors/connection_actor.hpp"
#include "actors/runtime.hpp"

namespace tether {

struct attempt_spec {
  connection_spec connection;
  bool stream = false;
  std::chrono::milliseconds timeout{0};  // 0 = none (the request deadline still bounds it)
  std::chrono::milliseconds idle_timeout{0};
};

// Messages to `request`:
//   (attempt_result_atom, int status, header_list, string body)  a complete response
//   (attempt_head_atom, int status, header_list)   a stream is committed; events follow
//   (attempt_events_atom, net::sse_events)         the whole SSE events of one upstream read
//   (attempt_end_atom)                             the stream ended cleanly
//   (attempt_failed_atom, int32 attempt_end, string message, bool committed)
// Spawns the attempt actor linked to `request`, which receives the messages above.
caf::actor spawn_attempt(caf::event_based_actor* request, runtime_ptr rt, attempt_spec spec);

}  // namespace tether
