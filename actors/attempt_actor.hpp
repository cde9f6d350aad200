// One try at one deployment. Owns the attempt timeout (until the response is committed: the whole
// body, or the first whole SSE event of a stream) and the stream idle timeout; reports facts up
// to the request actor and never decides a retry (Envoy's router split).
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <chrono>

#include "actors/connection_actor.hpp"
#include "actors/runtime.hpp"

namespace tether {

struct attempt_spec {
  connection_spec connection;
  bool stream = false;
  std::chrono::milliseconds timeout{0};  // 0 = none (the request deadline still bounds it)
  std::chrono::milliseconds idle_timeout{0};
  // Counted up before the connection actor is spawned; the request counts its work_ended
  // messages against it and outlives every connection (null: not counted, in tests).
  std::shared_ptr<std::atomic<std::uint32_t>> connections;
};

// Messages to `request`:
//   (att_result_atom, int status, header_list, string body)  a complete response
//   (att_head_atom, int status, header_list)       a stream is committed; events follow
//   (att_event_atom, string)                       one whole SSE event
//   (att_end_atom)                                 the stream ended cleanly
//   (att_fail_atom, int32 attempt_end, string message, bool committed)
caf::behavior attempt_actor(caf::event_based_actor* self, runtime_ptr rt, caf::actor request,
                            attempt_spec spec);

}  // namespace tether
