// The vocabulary of the actor tree (CAF 0.17 atoms: words of at most 10 characters). Local
// messages, but for acquire and grant, which a cluster member's link relays to and from the budget
// host (actors/budget_link_actor.hpp); no type here needs registering.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <optional>

#include "actors/policy/admission/slot_refusal.hpp"
#include "actors/policy/request/stop_reason.hpp"
#include "net/http_types.hpp"
#include "net/sse_framer.hpp"

namespace tether::net {
// http_header travels inside messages (headers of upstream responses).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, http_header& x) {
  return f(caf::meta::type_name("http_header"), x.name, x.value);
}
// A stream's events of one upstream read travel as one message (attempt → request).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sse_events& x) {
  return f(caf::meta::type_name("sse_events"), x.text, x.ends);
}
}  // namespace tether::net

namespace tether {

// budget ⇄ upstream connection actor. acquire and grant: part of the cluster's wire protocol.
using acquire_atom = caf::atom_constant<caf::atom("acquire")>;
using grant_atom = caf::atom_constant<caf::atom("grant")>;
using queue_timeout_atom = caf::atom_constant<caf::atom("wait_limit")>;
using slots_atom = caf::atom_constant<caf::atom("slots")>;
// (grant_atom, int32 slot_refusal, reason): a slot (none), or why there is none.
inline void send_grant(caf::event_based_actor* self, const caf::actor& to, slot_refusal why,
                       const std::string& reason = {}) {
  self->send(to, grant_atom::value, static_cast<std::int32_t>(why), reason);
}

// net/ (an io thread) → attempt actor (the response) and upstream connection actor (closed)
using up_head_atom = caf::atom_constant<caf::atom("head")>;
using up_body_atom = caf::atom_constant<caf::atom("body")>;
using up_end_atom = caf::atom_constant<caf::atom("end")>;
using up_whole_atom = caf::atom_constant<caf::atom("whole")>;
using up_fail_atom = caf::atom_constant<caf::atom("failure")>;
// (up_closed, closed_ns, head_ns, cut): the socket is closed; head_ns is when the response's head
// arrived, 0 if none did; cut: tether closed it after the request went out and before the answer's
// end, so the engine may still be working on it
using up_closed_atom = caf::atom_constant<caf::atom("closed")>;
// (up_fail, kind, message): kind is a net::upstream_failure, or one of these.
constexpr std::int32_t up_fail_overloaded = -1;     // the budget refused a slot: no room
constexpr std::int32_t up_fail_too_large = -2;      // the body outgrew request.max_response_bytes
constexpr std::int32_t up_fail_shutting_down = -3;  // the budget refused a slot: the drain ended
constexpr std::int32_t up_fail_too_heavy = -4;      // the budget refused a slot: over the token cap

// upstream connection actor → request actor, as it exits: the socket is gone, the slot is about
// to be freed (work_ended, upstream, attempt_index, closed_ns, held_slot, queue_wait_ns, head_ns,
// released_ns): released_ns is when the slot goes back, later than closed_ns by a cut attempt's
// release grace (actors/policy/engine/release_grace.hpp)
using work_ended_atom = caf::atom_constant<caf::atom("work_ended")>;
// upstream connection actor → itself, or the engine metrics actor → it: a cut attempt's release
// grace is over (or the engine's count says it let go), the slot goes back
using grace_over_atom = caf::atom_constant<caf::atom("grace_over")>;
// upstream connection actor → engine metrics actor: a cut attempt lingers until the engine's count
// lets it go (linger, upstream, closed_ns, due_ns, bound_ns, actor_addr)
using linger_atom = caf::atom_constant<caf::atom("linger")>;
// upstream connection actor → attempt actor: the slot is granted, the per-try clock starts
using granted_atom = caf::atom_constant<caf::atom("granted")>;

// attempt actor → request actor
using attempt_result_atom = caf::atom_constant<caf::atom("response")>;
using attempt_failed_atom = caf::atom_constant<caf::atom("failed")>;
using attempt_head_atom = caf::atom_constant<caf::atom("stream")>;
using attempt_events_atom = caf::atom_constant<caf::atom("events")>;
using attempt_end_atom = caf::atom_constant<caf::atom("stream_end")>;

// timers
using deadline_atom = caf::atom_constant<caf::atom("deadline")>;
using attempt_timeout_atom = caf::atom_constant<caf::atom("timed_out")>;
using idle_timeout_atom = caf::atom_constant<caf::atom("idle_limit")>;
using backoff_atom = caf::atom_constant<caf::atom("backoff")>;
// request actor → itself: everything has ended already (a request answered as it arrived)
using finish_atom = caf::atom_constant<caf::atom("finish")>;

// outside world → request actor / supervisor
// (client_gone_atom, int64 left_ns): the io thread saw the caller leave at left_ns
using client_gone_atom = caf::atom_constant<caf::atom("gone")>;
using drain_atom = caf::atom_constant<caf::atom("drain")>;
// (drain_now_atom): the drain timeout passed, or a second signal came: cancel every request
using drain_now_atom = caf::atom_constant<caf::atom("drain_now")>;
using drained_atom = caf::atom_constant<caf::atom("drained")>;

// upstream_health's listener → health actor: (health_atom, upstream, ejected, reason,
// duration_ms, remote); the actor's own timers: (health_sweep_atom), (health_check_atom,
// upstream, generation); a probe's end: (health_result_atom, upstream, passed, why)
using health_atom = caf::atom_constant<caf::atom("health")>;
using health_sweep_atom = caf::atom_constant<caf::atom("sweep")>;
using health_check_atom = caf::atom_constant<caf::atom("check")>;
using health_result_atom = caf::atom_constant<caf::atom("result")>;
// reloader → long-lived actors that follow the configuration: (adopt_runtime_atom, runtime_ptr)
using adopt_runtime_atom = caf::atom_constant<caf::atom("adopt")>;

// Why a tree is stopped, as the exit reason it carries down the links
// (actors/policy/request/stop_reason.hpp).
inline caf::error stop_error(stop_reason r) {
  return caf::error{static_cast<std::uint8_t>(r), caf::atom("stop")};
}
inline std::optional<stop_reason> stop_reason_of(const caf::error& e) {
  if (e.category() != caf::atom("stop")) return std::nullopt;
  return static_cast<stop_reason>(e.code());
}

// The moment something happened, as steady_clock nanoseconds (a plain integer crosses actors).
inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace tether
