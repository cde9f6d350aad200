// What every actor of a request shares: read-only once built (the router's counters, the metrics
// and the retry budget are internally synchronised). A reload builds a new one for the requests
// that arrive after it; a request keeps the one it started with to its end. The metrics, the
// retry budget, the timers, the tracer and the long-lived actors are one for the whole process,
// shared by every generation; an upstream's connections are shared while its address stays.
#pragma once

#include <caf/all.hpp>

#include <memory>
#include <vector>

#include "actors/ledger_tally.hpp"
#include "actors/metrics.hpp"
#include "actors/policy/engine/decode_step.hpp"
#include "actors/policy/request/call_table.hpp"
#include "actors/policy/request/retry_budget.hpp"
#include "actors/policy/request/retry_policy.hpp"
#include "actors/policy/routing/response_affinity.hpp"
#include "actors/policy/routing/router.hpp"
#include "actors/policy/routing/upstream_health.hpp"
#include "config/config.hpp"
#include "net/io_group.hpp"
#include "net/otlp_exporter.hpp"
#include "net/timer_service.hpp"
#include "net/upstream.hpp"

namespace tether {

struct gateway_runtime {
  config::gateway_config cfg;
  std::unique_ptr<router> routes;
  std::shared_ptr<metrics> stats;
  std::shared_ptr<retry_budget> retries;    // per upstream, asked before every retry
  std::shared_ptr<upstream_health> health;  // which upstreams take attempts, by index
  // Responses API id → the upstream that made it (previous_response_id follow-ups go there).
  std::shared_ptr<response_affinity> affinity;
  // The recent unsuccessful calls (one call, one deadline: call_table.hpp), shared by every
  // generation; and whether some model of this one tells calls by session or by body
  // (call_window_ms > 0), so that no other request's body is fingerprinted.
  std::shared_ptr<call_table> calls;
  bool calls_by_session = false;
  bool calls_by_body = false;
  // By upstream index (a retired upstream's entry stays, so that indices stay).
  std::vector<std::shared_ptr<net::upstream_transport>> upstreams;
  // By upstream index: its engine's observed decode step (actors/policy/engine/decode_step.hpp),
  // which sizes a cancelled attempt's release grace. Null for engine = "openai": nothing is
  // measured. Kept across reloads while the upstream keeps its index and names an engine.
  std::vector<std::shared_ptr<decode_step>> decode_steps;
  std::shared_ptr<net::timer_service> timers;  // cancellable timers for the request actors
  // The backoffs' jitter draw; empty = the random one (the actor tests pin it).
  retry_policy::jitter_source backoff_jitter;
  std::shared_ptr<net::otlp_exporter> tracer;  // null when telemetry.otlp_endpoint is empty
  caf::actor budget;
  // One per io thread (by io_group member), each leasing its slots from `budget`; a request's
  // attempts ask the shard of the thread that serves its caller. Empty (a cluster member, whose
  // link leases from the host): they ask `budget`.
  std::vector<caf::actor> budget_shards;
  // One per io thread (by io_group member), each holding the requests that thread's callers
  // started; the drain actor is the drain's one clock for all of them.
  std::vector<caf::actor> supervisors;
  caf::actor drain;
  caf::actor health_monitor;  // health_actor: announcements, ejection ends, active checks
  caf::actor engine_monitor;  // engine_metrics_actor: the engines' metrics polls
  caf::actor ledger;          // ledger_actor; null when [ledger] enabled = false
  std::shared_ptr<ledger::ledger_tally> ledger_tally;  // the ledger's, with it
};

using runtime_ptr = std::shared_ptr<gateway_runtime>;

// The upstream's decode step, or null (engine = "openai", or an index the runtime lacks).
inline decode_step* decode_step_of(const gateway_runtime& rt, std::size_t upstream) {
  return upstream < rt.decode_steps.size() ? rt.decode_steps[upstream].get() : nullptr;
}

// The first generation: the config, the router, the upstream clients on `io`, the metrics, the
// retry budget, the timers and the tracer. The budget and supervisor are added by serve.
runtime_ptr build_runtime(config::gateway_config cfg, const net::io_group& io);

// A reload's generation (config/reload.hpp): its config and router; the upstreams the plan names
// fresh get new clients on `io`, the others keep `running`'s; everything process-wide is shared
// and left as it is (a reload refused after this changes nothing).
runtime_ptr next_runtime(const gateway_runtime& running, config::gateway_config next,
                         const std::vector<std::size_t>& fresh_upstreams, const net::io_group& io);

// The process-wide parts take on `next`'s upstreams and retry limits: the metrics name the new
// upstreams, the retry budget counts them under the new limits.
void share_limits_of(const gateway_runtime& next);

}  // namespace tether
