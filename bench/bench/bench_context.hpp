// What every scenario shares: the targets, the mock's control endpoint, the one io_context the
// load runs on, the run's options and its random source.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/json/object.hpp>

#include "bench/bench/client_connection.hpp"
#include "bench/bench/control_client.hpp"

namespace tether::bench {

using tcp = boost::asio::ip::tcp;
using std::chrono::milliseconds;

struct target {
  std::string name;  // direct | nginx | tether
  tcp::endpoint endpoint;
  std::optional<int> pid;  // a proxy's (master) process, for RSS
};

struct bench_options {
  bool quick = false;
  // Scenario 12 (abandon) runs only when asked for: it needs a real engine (bench/abandon.sh).
  std::vector<int> scenarios{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  unsigned budget_cap = 8;
  // A tether node that takes its slots from another node's budget (scenario 7); not a target of
  // the other scenarios.
  std::optional<target> cluster_member;
  // A member configured with lease_idle_ms = 0: every acquire is a round trip to the host.
  std::optional<target> cluster_member_cold;
  // Scenario 8's nodes, each serving bench_models::replicated on three deployments (see
  // replica_config): all three live; one dead, never ejected; one dead, ejected after failures.
  std::optional<target> replicas_healthy;
  std::optional<target> replicas_dead;
  std::optional<target> replicas_ejecting;
  // Scenario 9's nodes (token_budget_config): the upstream's tokens in flight capped at the
  // mock's KV budget; its requests in flight capped instead.
  std::optional<target> tokens_node;
  std::optional<target> slots_node;
  // Scenario 11's targets: nginx with a worker per CPU and tether unpinned, both free to use
  // every CPU (the pinned pair is the usual nginx and tether targets).
  std::optional<target> every_cpu_nginx;
  std::optional<target> every_cpu_tether;
  // The mock's process (--mock HOST:PORT@PID), for its CPU: scenario 10 tells a load generator
  // that could not keep up from a proxy that could not.
  std::optional<int> mock_pid;
  // Scenario 12: the engine's `-v --log-timestamps` log (the direct target is the engine).
  std::string engine_log;
  // Scenario 13 (prefix): the llama-server replicas behind the targets (their /metrics is read
  // between phases) and the prefix node's prefix_load_factor.
  std::vector<tcp::endpoint> engine_replicas;
  double prefix_load_factor = 1.25;
  steady::time_point hard_deadline;  // no phase starts after this
};

// The model names the bench sends. A proxy forwards them unchanged; tether's config (printed by
// `tether-bench --print-tether-config`) maps each onto the mock model of the same name, and the
// `capped-` ones onto a second upstream with max_in_flight = budget_cap.
struct bench_models {
  static constexpr const char* immediate = "mock";
  static constexpr const char* stream = "mock-stream-20x10";
  static constexpr double stream_interval_ms = 10;
  static constexpr const char* waiting = "mock-delay-1000";
  static constexpr const char* long_stream = "mock-stream-100x10";
  static constexpr const char* hang = "mock-hang";
  static constexpr const char* slow_stream = "mock-stream-600x1000";
  static constexpr const char* capped_work = "capped-mock-delay-20";
  static constexpr double capped_work_ms = 20;
  static constexpr const char* capped_hang = "capped-mock-hang";
  static constexpr const char* capped_queued = "capped-mock-delay-50";
  // Scenario 10: 50 events a second, each stamped with the mock's send time; long enough for a
  // step's ramp, warm-up and steady window (full and quick).
  static constexpr const char* stamped_stream = "mock-stream-stamped-400x20";
  static constexpr const char* stamped_stream_quick = "mock-stream-stamped-200x20";
  static constexpr std::uint32_t stamped_events = 400;
  static constexpr std::uint32_t stamped_events_quick = 200;
  static constexpr double stamped_interval_ms = 20;
  // Scenario 8: one model on three upstreams (replica_config); the mock answers it at once.
  static constexpr const char* replicated = "mock-replicated";
};

// The shape of scenario 8's nodes, shared by the config they are started with and the scenario
// that judges them. A refused connection is retried at once on another deployment, and an
// ejection outlasts the scenario, so each ejection period is the whole run after it began.
struct replica_shape {
  static constexpr unsigned max_retries = 2;
  static constexpr unsigned retry_backoff_ms = 0;
  static constexpr unsigned eject_after_failures = 5;
  static constexpr unsigned eject_base_ms = 30000;
  static constexpr const char* dead_upstream = "dead";
};

// Which of scenario 8's nodes a config is for.
enum class replica_mode { healthy, dead, ejecting };

// `cluster`: a line of the [cluster] table (`budget_listen = "…"` or `budget_host = "…"`), or "".
std::string tether_config(const std::string& listen, const std::string& mock, unsigned cap,
                          const std::string& cluster = "");

// A node for scenario 8: bench_models::replicated on upstreams live-a and live-b (the mock) and a
// third one, live-c (the mock) with `healthy`, else replica_shape::dead_upstream at `dead` (an
// address nothing listens on); ejection after failures is off on every upstream with `dead`.
// bench_models::immediate is served by live-a and live-b only, so warming the node up never
// touches the dead upstream.
std::string replica_config(const std::string& listen, const std::string& mock, replica_mode mode,
                           const std::string& dead);

class bench_context {
 public:
  bench_context(std::vector<target> targets, tcp::endpoint mock, bench_options options);

  boost::asio::io_context& ioc() { return ioc_; }
  const std::vector<target>& targets() const { return targets_; }
  const target* find(const std::string& name) const;
  // The targets in an order that rotates with `round`, so no target always runs first.
  std::vector<const target*> rotation(std::size_t round) const;
  const mock_control& mock() const { return mock_; }
  const bench_options& options() const { return options_; }
  std::mt19937_64& rng() { return rng_; }
  double uniform(double lo, double hi);
  bool out_of_time() const { return steady::now() >= options_.hard_deadline; }

  // Runs the load until done() holds or `limit` passes; true if done() held.
  bool run_until(const std::function<bool()>& done, milliseconds limit);
  // Runs the load for `d` (timers, in-flight exchanges), whatever happens.
  void run_for(milliseconds d);
  // Lets time pass with the load loop idle (the mock and the proxies settle).
  void pause(milliseconds d) { run_for(d); }

  // A request with a per-request id, so the mock's log can be matched with the caller's view.
  std::string next_request_id(const std::string& prefix);
  std::shared_ptr<const std::string> request(const target& t, const std::string& model, bool stream,
                                             const std::vector<std::string>& headers = {}) const;

  // Resident set of a target's processes (an nginx master and its workers), in KiB.
  std::optional<double> rss_kib(const target& t) const;
  // CPU time (user + system) the target's process and its children have used so far (nginx's
  // worker is its master's child); nullopt without a pid.
  std::optional<double> cpu_seconds(const target& t) const;
  // The system part of it: the kernel's work on the process's behalf (its sockets, loopback
  // delivery, epoll), which the two proxies share; the rest is each one's own code.
  std::optional<double> system_cpu_seconds(const target& t) const;
  // The target's process and its children (nginx's master and its workers); empty without a pid.
  std::vector<int> process_tree(const target& t) const;

 private:
  boost::asio::io_context ioc_;
  std::vector<target> targets_;
  mock_control mock_;
  bench_options options_;
  std::mt19937_64 rng_{20240611};
  std::uint64_t next_id_ = 0;
};

// Matches the mock's log (from GET /_stats) to requests by the x-request-id the bench sent.
// A process's or a thread's CPU time so far from its /proc stat file (/proc/<pid>/stat,
// /proc/<pid>/task/<tid>/stat): user and system seconds; nullopt when it cannot be read.
std::optional<std::pair<double, double>> cpu_times_of(const std::string& stat_path);

std::unordered_map<std::string, boost::json::object> mock_log_by_request_id(
    const boost::json::value& stats);

}  // namespace tether::bench
