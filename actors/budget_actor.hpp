// The single owner of concurrency: global, per-upstream and per-key caps, and the admission queue.
// A slot is held by an upstream connection actor and released only by that actor's down_msg —
// which it sends by exiting after its socket is closed — so the count is of real work, never of
// callers still waiting (a semaphore released when the caller gives up would let a capacity of
// one run two workers at once).
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <vector>

#include "actors/runtime.hpp"
#include "net/timer_service.hpp"

namespace tether {

struct budget_limits {
  std::uint32_t global = 512;
  std::vector<std::uint32_t> per_upstream;
  std::vector<std::uint32_t> per_key;  // 0 = no cap
  std::uint32_t queue_max = 2048;
  std::chrono::milliseconds queue_timeout{0};
  std::vector<std::uint64_t> tokens_per_upstream;  // max_tokens_in_flight, 0 = no cap
  std::vector<std::uint64_t> rpm;                  // per key, 0 = unlimited
  std::vector<std::uint64_t> tpm;
  std::vector<std::uint32_t> weight;  // per key: its share of the admission queue
};

budget_limits budget_limits_from(const config::gateway_config& cfg);

using holders_atom = caf::atom_constant<caf::atom("holders")>;
using limits_atom = caf::atom_constant<caf::atom("limits")>;
// budget host ⇄ a cluster member's budget_link_actor (lease_book). Part of the cluster's wire
// protocol: these strings stay as they are, or nodes of two versions cannot talk.
using lease_atom = caf::atom_constant<caf::atom("lease")>;
using lease_grant_atom = caf::atom_constant<caf::atom("lease_ok")>;
using lease_return_atom = caf::atom_constant<caf::atom("lease_ret")>;
using recall_atom = caf::atom_constant<caf::atom("recall")>;
// a request actor ⇄ its node's budget (on a member, the link relays to the host): per-key rates.
// Part of the cluster's wire protocol.
using rate_atom = caf::atom_constant<caf::atom("rate")>;
using rate_fix_atom = caf::atom_constant<caf::atom("rate_fix")>;
// a node's health actor ⇄ its budget (on a member, the link, which relays to and from the host).
// Part of the cluster's wire protocol: these strings stay as they are.
using health_subscribe_atom = caf::atom_constant<caf::atom("h_sub")>;
using health_report_atom = caf::atom_constant<caf::atom("h_report")>;
using health_news_atom = caf::atom_constant<caf::atom("h_news")>;

// Protocol: (acquire_atom, upstream: uint64, key: int64 (-1 = none), rank: int64, tokens:
// uint64) from the connection actor (tokens: the token weight held with the slot, 0 where the
// upstream has no token cap; rank: its place in its key's lane,
// actors/policy/admission/queue_priority.hpp); answered later with (grant_atom, refusal: int32,
// reason: string): a slot_refusal, none (0) for a slot sent to it. (slots_atom) → the number of
// slots held (for drain's leak report). (limits_atom, global, per_upstream: vector<uint32>,
// per_key: vector<uint32>, queue_max, queue_timeout_ms: int64, tokens_per_upstream: vector<uint64>,
// rpm: vector<uint64>, tpm: vector<uint64>, weight: vector<uint32>) → true: a reload's caps, from
// now on (slot_book::set_caps); from this node only. (drain_now_atom), from the supervisor at the
// drain's end: this node's waiters are refused and its later asks too ("the gateway is shutting
// down"); members' leases are served as before. (holders_atom) → (vector<actor> holders,
// vector<uint64> upstreams, vector<int64> keys, vector<uint64> tokens): who holds a slot now (a
// cluster member that rejoins its budget host registers them there). Leases, from a lessee (a
// cluster member's link actor, an io thread's budget shard), which may hold many slots:
// (lease_atom, upstream, key, rank, tokens, lease: uint64) asks for one slot under that id,
// answered with (lease_grant_atom, lease, refusal: int32 (slot_refusal, none = granted), reason)
// sent to the link; (lease_return_atom, lease) gives a held slot back or withdraws a queued ask.
// The link is monitored: its down_msg frees all it holds. Recalls (slot_book::update_recalls):
// (recall_atom, on: bool, scope: int32 (recall_scope), index: int64) — all its slots while anyone
// but that lessee waits in the queue or the global cap is reached, its slots of an upstream or a
// key while that cap is reached; the same with on = false when that is no longer so. Rates
// (actors/policy/admission/rate_book.hpp): (rate_atom, key: int64, tokens: uint64) from a request
// actor whose key has an rpm or tpm → (admitted: bool, never: bool, retry_after_ms: int64,
// charged_second: int64, reason: string); the request is charged one request and `tokens`.
// (rate_fix_atom, key, charged_second, estimate: uint64, actual: uint64) when it has ended: its
// tokens are corrected to what the upstream reported it used. Upstream health across the cluster
// (the budget host relays it): (health_subscribe_atom) from a node's health actor, or from a
// member's link on the host's behalf, is answered with a (health_news_atom, upstream name, reason:
// int32, remaining_ms: int64) for every ejection still running, then one for each reported later;
// (health_report_atom, upstream name, reason, duration_ms) reports an ejection decided by the
// sender's own evidence, and goes to every subscriber but the sender. Subscribers are monitored.
// The work and queue gauges count this node's own connection actors only: a member counts the work
// it runs itself, so the sum over the cluster's nodes is the cluster's work. `timers` runs the
// queue timeouts (unused when limits.queue_timeout is 0).
caf::behavior budget_actor(caf::event_based_actor* self, budget_limits limits, metrics* stats,
                           net::timer_service* timers);

}  // namespace tether
