// Closed-loop load: N keep-alive connections, each sending its next request as soon as the
// previous answer is complete. Bounded by a duration and by a request count.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench/bench_context.hpp"

namespace tether::bench {

struct closed_loop_spec {
  unsigned concurrency = 1;
  milliseconds duration{1000};
  std::size_t max_requests = 1'000'000;
  // The request to send as the k-th of the run (k from 0).
  std::function<std::shared_ptr<const std::string>(std::size_t)> make;
};

struct closed_loop_result {
  std::vector<exchange_result> results;    // completed exchanges, ok or not
  std::vector<std::size_t> request_index;  // the k of each of results (spec.make's argument)
  double elapsed_s = 0;                    // first send to last completion
  std::size_t ok = 0;
  std::size_t failed = 0;
  std::size_t unfinished = 0;  // still running when the drain limit passed (then aborted)
};

closed_loop_result run_closed_loop(bench_context& ctx, const target& t,
                                   const closed_loop_spec& spec);

// One concurrency level of a comparison: `rounds` closed loops of the immediate-answer request
// through each of `targets` in turn (the order rotates every round), keyed by target name.
struct level_samples {
  std::map<std::string, std::vector<double>> latencies_ms;  // 2xx answers only
  std::map<std::string, std::size_t> ok, failed;
  std::map<std::string, double> seconds;
  std::map<std::string, double> cpu_s;  // the proxy process's CPU time over its loops (pid known)
  std::map<std::string, double> system_cpu_s;  // the system part of cpu_s
  double rps(const std::string& name) const;
  // CPU time per completed request in µs; 0 without a pid or a request.
  double cpu_us_per_request(const std::string& name) const;
  // Its system part.
  double system_cpu_us_per_request(const std::string& name) const;
};
level_samples sample_level(bench_context& ctx, const std::vector<const target*>& targets,
                           unsigned concurrency, std::size_t rounds, milliseconds slice);

// Opens and warms every target's connections and pools, unmeasured.
void warm_up(bench_context& ctx, const std::vector<const target*>& targets, unsigned concurrency);

}  // namespace tether::bench
