// One try at one deployment. Owns the per-try timeout (from the slot's grant until the response
// is committed: the whole body, or the first whole SSE event of a stream) and the stream idle
// timeout; reports facts up to the request actor and never decides a retry (Envoy's router
// split). Its exit, with the request's stop reason, takes its connection actor down.
//
// Its connection actor, declared here too (the attempt holds one; tests spawn it alone): one
// upstream connection: asks the budget for a slot, runs one net::upstream_exchange, and exits
// only after net/ reports the socket closed (or parked idle). Its exit is what frees the slot.
// When its attempt dies abnormally (the request's stop reason coming down the links, or the
// attempt's own failure), it cancels the exchange and waits for the close before it exits.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <optional>

#include "actors/runtime.hpp"
#include "config/surface.hpp"
#include "net/upstream.hpp"

namespace tether {

struct connection_spec {
  std::size_t upstream = 0;
  std::int64_t key = -1;  // gateway key index, -1 = none
  std::int64_t rank =
      0;  // its place in its key's lane (actors/policy/admission/queue_priority.hpp)
  // The token weight the budget holds with the slot: 0 where the upstream has no token cap.
  std::uint64_t tokens = 0;
  net::upstream_request request;
  // 0 = none. Enforced as the body arrives, on the io thread (relay_events), so the socket is
  // closed at the limit however far behind the actors run; an event stream relayed to a caller
  // who asked for one is not limited, and one assembled into a whole answer is limited by its
  // attempt (actors/policy/wire/stream_assembly.hpp).
  std::uint64_t max_response_bytes = 0;
  bool stream = false;  // the upstream was asked for an event stream
  // The caller connection's executor (opaque): the exchange runs on the caller's io thread, where
  // the request's actors run, so this actor's cancel reaches the upstream socket without a hop.
  // The deadline needs no actor: it reaches the socket as request.close_at. Null: the pooled
  // connection's executor, else its origin's.
  std::shared_ptr<const net::connection_affinity> affinity;
  // Tell the attempt when the budget grants the slot (granted_atom): its per-try clock starts
  // then.
  bool tell_grant = false;
  // Which of the request's attempts this connection serves (its place in the access line).
  std::uint32_t attempt_index = 0;
  // Who is asked for the slot: the caller's io thread's budget shard (null: rt->budget).
  caf::actor budget;
  // engine = "sglang": the rid the request's body names the work by, which a cancel aborts in
  // the engine (actors/engine_abort.hpp). Empty for every other engine.
  std::string engine_rid;
};

struct attempt_spec {
  connection_spec connection;
  bool stream = false;  // the caller asked for an event stream
  // The surface the caller and the upstream speak: a relayed stream ends at its last event
  // (actors/policy/wire/answer_end.hpp).
  surface where = surface::chat;
  // upstream_stream = "always" for a caller who did not: the upstream was asked for a stream on
  // this surface, and its events are assembled into the caller's whole answer.
  std::optional<surface> assemble;
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

// Spawns the connection actor linked to `attempt`, which receives up_* messages (straight from
// net/) and (granted_atom); `request` receives (work_ended_atom, upstream, attempt_index,
// closed_ns, held_slot, queue_wait_ns, head_ns) as the connection actor exits, however it ends:
// the request counts its connections down by it, and an attempt whose connection never held a
// slot never reached the upstream. head_ns: when the response's head arrived, 0 if none did.
caf::actor spawn_connection(caf::event_based_actor* attempt, runtime_ptr rt, caf::actor request,
                            connection_spec spec);

}  // namespace tether
