// The scenarios (the six of issue #6, and later ones). Each runs its load against the targets
// interleaved (the order rotates every round) and returns its raw figures and verdicts as one JSON
// object:
//   {"name", "config", "targets": {<target>: {...}}, "derived": {...}, "checks": [...]}
// A check is {"target", "what", "value", "limit", "met"}: the report lists them all.
#pragma once

#include <map>
#include <string>

#include <boost/json/object.hpp>

#include "bench/bench/bench_context.hpp"

namespace tether::bench {

boost::json::object run_overhead(bench_context& ctx);
boost::json::object run_streaming(bench_context& ctx);
boost::json::object run_cancellation(bench_context& ctx);
boost::json::object run_deadline_storm(bench_context& ctx);
boost::json::object run_budget(bench_context& ctx);
// A member node (options().cluster_member) against the standalone tether target: what acquiring
// each slot from a remote budget actor adds.
boost::json::object run_shared_budget(bench_context& ctx);
// One model on three deployments, one of them refusing connections (issue #29), through the
// nodes of options().replicas_*: what failing over costs with and without ejection.
boost::json::object run_dead_replica(bench_context& ctx);
// A mix of short and very long max_tokens against the mock's KV budget (issue #30), through the
// nodes of options().tokens_node and slots_node: how often the server is over its budget with
// token-weighted admission and with a request-count cap.
boost::json::object run_token_budget(bench_context& ctx);
// Many concurrent streams of 50 events a second, each event stamped with the mock's send time
// (issue #27): the CPU each target's process spends per relayed event and the relay lag, stepping
// the number of streams up until a target falls behind.
boost::json::object run_streaming_throughput(bench_context& ctx);
// Closed loops through nginx with a worker per CPU and an unpinned tether, beside the pinned pair
// (issue #27): throughput, CPU per request and the busiest thread's share of each process's CPU.
boost::json::object run_every_cpu(bench_context& ctx);
// Callers against a real engine (llama-server; options().engine_log is its log), a share of them
// leaving mid-generation or at a deadline (issue #60): how long the engine's work outlives them,
// judged from the engine's own log.
boost::json::object run_abandon(bench_context& ctx);
// Agents with long system prompts in multi-turn conversations, and unique prompts, against
// llama-server replicas (options().engine_replicas) behind tether routing by least work, tether
// routing by prefix and nginx round robin (issue #63): time to first token, requests per minute,
// each replica's share and the engines' cache hits.
boost::json::object run_prefix(bench_context& ctx);
// idle_kib: each proxy's RSS before the bench sent it anything.
boost::json::object run_memory(bench_context& ctx, const std::map<std::string, double>& idle_kib);

// A check for the report: `value` against `limit`, met as the scenario judged it.
boost::json::object check(const std::string& target, const std::string& what, double value,
                          const std::string& limit, bool met);

}  // namespace tether::bench
