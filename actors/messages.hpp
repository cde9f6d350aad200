// The vocabulary of the actor tree (CAF 0.17 atoms, ≤ 10 characters). Local messages only:
// nothing here crosses the middleman, so no type needs registering.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>

#include "net/http_types.hpp"

namespace tether::net {
// http_header travels inside messages (headers of upstream responses).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, http_header& x) {
  return f(caf::meta::type_name("http_header"), x.name, x.value);
}
}  // namespace tether::net

namespace tether {

// budget ⇄ upstream connection actor
using acquire_atom = caf::atom_constant<caf::atom("acquire")>;
using grant_atom = caf::atom_constant<caf::atom("grant")>;
using queue_timeout_atom = caf::atom_constant<caf::atom("q_tmo")>;
using slots_atom = caf::atom_constant<caf::atom("slots")>;

// net/ (an io thread) → attempt actor (head, body, end, failure) and upstream connection actor
// (closed)
using up_head_atom = caf::atom_constant<caf::atom("up_head")>;
using up_body_atom = caf::atom_constant<caf::atom("up_body")>;
using up_end_atom = caf::atom_constant<caf::atom("up_end")>;
using up_whole_atom = caf::atom_constant<caf::atom("up_whole")>;
using up_fail_atom = caf::atom_constant<caf::atom("up_fail")>;
using up_closed_atom = caf::atom_constant<caf::atom("up_closed")>;
// (up_fail, kind, message): kind is a net::upstream_failure, or one of these.
constexpr std::int32_t up_fail_overloaded = -1;  // the budget refused a slot
constexpr std::int32_t up_fail_too_large = -2;   // the body outgrew request.max_response_bytes

// upstream connection actor → request actor: the socket is gone, the slot is about to be freed
// (work_end, upstream, closed_ns, held_slot, queue_wait_ns)
using work_ended_atom = caf::atom_constant<caf::atom("work_end")>;
// upstream connection actor → attempt actor: waited this long for a slot
using queued_atom = caf::atom_constant<caf::atom("queued")>;

// attempt actor → request actor
using conn_spawned_atom = caf::atom_constant<caf::atom("conn_new")>;
using att_result_atom = caf::atom_constant<caf::atom("att_res")>;
using att_fail_atom = caf::atom_constant<caf::atom("att_fail")>;
using att_head_atom = caf::atom_constant<caf::atom("att_head")>;
using att_event_atom = caf::atom_constant<caf::atom("att_evt")>;
using att_end_atom = caf::atom_constant<caf::atom("att_end")>;

// timers
using deadline_atom = caf::atom_constant<caf::atom("deadline")>;
using attempt_timeout_atom = caf::atom_constant<caf::atom("att_tmo")>;
using idle_timeout_atom = caf::atom_constant<caf::atom("idle_tmo")>;
using backoff_atom = caf::atom_constant<caf::atom("backoff")>;
using safety_atom = caf::atom_constant<caf::atom("safety")>;

// outside world → request actor / supervisor
// (client_gone_atom, int64 left_ns): the io thread saw the caller leave at left_ns
using client_gone_atom = caf::atom_constant<caf::atom("gone")>;
using adopt_atom = caf::atom_constant<caf::atom("adopt")>;
using drain_atom = caf::atom_constant<caf::atom("drain")>;
using drain_cancel_atom = caf::atom_constant<caf::atom("drain_cxl")>;
using drained_atom = caf::atom_constant<caf::atom("drained")>;

// The moment something happened, as steady_clock nanoseconds (a plain integer crosses actors).
inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace tether
