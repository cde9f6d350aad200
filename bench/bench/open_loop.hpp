// Open-loop load: requests go out on a fixed schedule, whatever the answers do, over a pool of
// keep-alive connections. A request's latency runs from its scheduled moment, so a target that
// falls behind is charged for the wait its backlog adds (no coordinated omission). Against the
// closed loop, where latency at a concurrency is that concurrency over throughput, this measures
// what a proxy adds to a request at a load below its capacity.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench/bench_context.hpp"

namespace tether::bench {

// Stops the given processes (SIGSTOP) `at` after the schedule's start for `length`, while the
// schedule goes on: what a pause of the proxy (a VM stall, a swap-in) leaves behind it.
struct open_loop_stall {
  milliseconds at{0};
  milliseconds length{0};
  std::vector<int> pids;
};

struct open_loop_spec {
  double rate_per_s = 1000;
  milliseconds duration{1000};
  unsigned connections = 64;        // opened and warmed (unmeasured) before the schedule starts
  unsigned max_connections = 1024;  // beyond this, a due request waits for a connection to free
  std::shared_ptr<const std::string> request;
  std::optional<open_loop_stall> stall;
};

struct open_loop_result {
  std::vector<double> latencies_ms;  // 2xx answers, from the scheduled moment to the answer's end
  std::size_t scheduled = 0;
  std::size_t ok = 0;
  std::size_t failed = 0;
  std::size_t unfinished = 0;  // not answered when the drain limit passed (then aborted)
  // Sent more than 1 ms after their moment: the load generator or the pool fell behind; their
  // latency still counts from the moment.
  std::size_t late_sends = 0;
  std::size_t peak_in_flight = 0;
  double elapsed_s = 0;  // first moment to last answer
  // With a stall: every answered request's scheduled moment (ms from the start) and latency, in
  // scheduled order.
  std::vector<std::pair<double, double>> by_moment;
};

// After a stall: from the resume until the backlog has drained, i.e. to the first request due
// after the resume from which `run` requests in a row answered within `threshold_ms`; nullopt if
// that never happened.
std::optional<double> recovery_ms(const std::vector<std::pair<double, double>>& by_moment,
                                  double resume_ms, double threshold_ms, std::size_t run = 50);

// The latencies of the requests due in [from_ms, to_ms), by the step (of step_ms) in which each
// was due: how a stall's requests and those after the resume fared, moment by moment. Steps
// without a request due are left out.
struct timeline_step {
  double due_ms = 0;  // the step's start
  std::size_t requests = 0;
  double p50_ms = 0;
  double p99_ms = 0;
};
std::vector<timeline_step> timeline(const std::vector<std::pair<double, double>>& by_moment,
                                    double from_ms, double to_ms, double step_ms);

open_loop_result run_open_loop(bench_context& ctx, const target& t, const open_loop_spec& spec);

}  // namespace tether::bench
