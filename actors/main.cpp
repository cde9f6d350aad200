// tether: `tether --config FILE` serves, `tether check --config FILE` validates and prints the
// effective config, `tether usage --config FILE …` prints the ledger, `tether --version`. The
// process owns its CLI: argv never reaches CAF.
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string_view>
#include <thread>

#include "actors/access_log.hpp"
#include "actors/budget_actor.hpp"
#include "actors/budget_link_actor.hpp"
#include "actors/budget_shard_actor.hpp"
#include "actors/drain_actor.hpp"
#include "actors/engine_metrics_actor.hpp"
#include "actors/gateway.hpp"
#include "actors/health_actor.hpp"
#include "actors/ledger_actor.hpp"
#include "actors/messages.hpp"
#include "actors/reloader.hpp"
#include "actors/runtime.hpp"
#include "actors/scheduler.hpp"
#include "actors/supervisor_actor.hpp"
#include "actors/usage_command.hpp"
#include "config/loader.hpp"
#include "net/downstream.hpp"
#include "net/io_runtime.hpp"
#include "net/otlp_exporter.hpp"
#include "net/upstream.hpp"

namespace {

// glibc keeps 7 freed blocks of each size per thread for the next allocation of that size; a
// request frees more than 7 of some sizes between allocations of them, and the rest take
// malloc's slow path (_int_free, then _int_malloc). glibc reads its tunables only when a process
// starts, so the gateway sets a larger count (server.malloc_tcache_count) and starts itself
// again, once, before it does anything else (same pid, arguments, CPU affinity). A
// GLIBC_TUNABLES set by whoever runs it is left as it is, and if the restart fails tether runs as
// it is. The larger cache cuts the instructions per request, more so with many callers at once.
void restart_with_allocator_tunables(char** argv, std::uint32_t tcache_count) {
  if (tcache_count == 0 || std::getenv("GLIBC_TUNABLES") != nullptr) return;
  const auto tunables = "glibc.malloc.tcache_count=" + std::to_string(tcache_count);
  if (setenv("GLIBC_TUNABLES", tunables.c_str(), 1) != 0) return;
  // The binary's own path, not /proc/self/exe: the kernel names a process after the file it
  // executes, and ps, top and ss would show the gateway as "exe".
  char self[4096];
  const auto n = readlink("/proc/self/exe", self, sizeof self - 1);
  const std::string_view deleted = " (deleted)";
  if (n > 0) {
    self[n] = '\0';
    if (!std::string_view(self, static_cast<std::size_t>(n)).ends_with(deleted)) execv(self, argv);
  }
  execv("/proc/self/exe", argv);
  unsetenv("GLIBC_TUNABLES");
}

int usage(int code) {
  std::fprintf(code == 0 ? stdout : stderr,
               "usage: tether --config FILE        serve\n"
               "       tether check --config FILE  validate and print the effective config\n"
               "       tether usage --config FILE  print the ledger (tether usage --help)\n"
               "       tether --version\n");
  return code;
}

std::optional<tether::config::gateway_config> load_or_report(const std::string& path) {
  auto result = tether::config::load_file(path);
  if (!result.errors.empty()) {
    for (const auto& e : result.errors) std::fprintf(stderr, "config error: %s\n", e.c_str());
    return std::nullopt;
  }
  return std::move(result.config);
}

// CPUs this process may run on (its affinity mask: taskset, cgroup cpusets), not the machine's.
unsigned usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) {
    return static_cast<unsigned>(CPU_COUNT(&set));
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// "host:port" (validated by config/) → parts.
std::pair<std::string, std::uint16_t> split_host_port(const std::string& hp) {
  auto colon = hp.rfind(':');
  return {hp.substr(0, colon), static_cast<std::uint16_t>(std::stoi(hp.substr(colon + 1)))};
}

// What the main thread and the shutdown watcher share once a stop was asked for.
struct shutdown_watch {
  std::atomic<std::int64_t> teardown_ns{0};  // when the drain ended; 0 before
  std::atomic<bool> cutting{false};          // a second signal asked for an exit now
};

// Once a stop was asked for, stopping is bounded: a second SIGTERM/SIGINT ends the process at
// once (the operator's "now"), and so does a teardown still running `teardown_limit` after the
// drain (an actor or thread that never ends would otherwise leave a process that ignores every
// later SIGTERM: its signals stay blocked for sigwait, which is not called again). "At once"
// still cuts the work in flight first, as the drain timeout does: each request closes its
// upstream connection itself, and is answered and logged, instead of leaving the upstream to
// notice the dead process. The main thread exits once that drain has ended; a cut that does not
// end within `cut_limit` is not waited for.
void watch_the_shutdown(sigset_t signals, caf::actor drain, std::shared_ptr<shutdown_watch> watch) {
  constexpr std::int64_t teardown_limit_ns = 10'000'000'000;
  std::thread([signals, drain, watch] {
    constexpr auto cut_limit = std::chrono::milliseconds(500);
    for (;;) {
      timespec tick{0, 200'000'000};
      if (sigtimedwait(&signals, nullptr, &tick) > 0) {
        watch->cutting = true;
        tether::log_warn("second signal: cutting the requests in flight, then exiting");
        caf::anon_send(drain, tether::drain_now_atom::value);
        std::this_thread::sleep_for(cut_limit);
        tether::log_error("second signal: the requests in flight did not end in 500 ms; exiting");
        std::fflush(nullptr);
        std::_Exit(1);
      }
      auto since = watch->teardown_ns.load();
      if (since != 0 && tether::now_ns() - since > teardown_limit_ns) {
        tether::log_error("shutdown still not finished 10 s after the drain; exiting");
        std::fflush(nullptr);
        std::_Exit(1);
      }
    }
  }).detach();
}

// Signals are taken synchronously by the main thread alone (sigwait in serve); every thread
// started after this inherits the blocked mask. SIGHUP is blocked too, so that a reload asked for
// while the gateway is still starting waits for it instead of killing it.
sigset_t block_stop_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigset_t blocked = signals;
  sigaddset(&blocked, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &blocked, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  return signals;
}

// Waits for SIGTERM or SIGINT, reloading the config at each SIGHUP meanwhile; returns the stop
// signal. (A SIGHUP once the drain has begun stays pending: nothing reloads a stopping gateway.)
int serve_until_stopped(sigset_t stop_signals, tether::reloader& reloads) {
  sigset_t signals = stop_signals;
  sigaddset(&signals, SIGHUP);
  for (;;) {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig != SIGHUP) return sig;
    reloads.reload();
  }
}

tether::net::server_limits limits_of(const tether::config::server_config& server) {
  tether::net::server_limits limits;
  limits.max_request_bytes = server.max_request_bytes;
  limits.max_header_bytes = server.max_header_bytes;
  limits.max_header_fields = server.max_header_fields;
  limits.max_connections = server.max_connections;
  limits.header_timeout = server.header_timeout;
  limits.keepalive_timeout = server.keepalive_timeout;
  return limits;
}

// Runs the drain (the drain actor answers once every io thread's request trees have ended) and
// logs what it cut short and whether any budget slot was left.
void drain_and_report(caf::actor_system& system, tether::gateway_runtime& rt) {
  using namespace tether;
  std::uint64_t cancelled = 0;
  {
    caf::scoped_actor self{system};
    self->request(rt.drain, caf::infinite, drain_atom::value)
        .receive([&](drained_atom, std::uint64_t n) { cancelled = n; },
                 [&](caf::error& err) { log_error("drain failed: " + system.render(err)); });
    // Each shard gives back the slots it keeps idle (the drain's end, which the drain actor tells
    // only when the timeout cut requests short) and then answers: its returns reach the budget
    // before the budget is asked. Slots still at work are counted by the budget as leases.
    for (const auto& shard : rt.budget_shards) {
      self->send(shard, drain_now_atom::value);
      self->request(shard, std::chrono::seconds(5), slots_atom::value)
          .receive([](std::uint64_t) {}, [](caf::error&) {});
    }
    std::uint64_t leftover = 0;
    self->request(rt.budget, std::chrono::seconds(5), slots_atom::value)
        .receive([&](std::uint64_t n) { leftover = n; }, [&](caf::error&) {});
    log_info("drained: " + std::to_string(cancelled) +
             " request(s) cancelled at the drain timeout, " + std::to_string(leftover) +
             " budget slot(s) left");
  }
}

// SCHED_BATCH for every thread (threads inherit it), if server.sched_batch asks: a woken thread no
// longer preempts its waker. Off by default: a request's actors run on its caller's io thread, so
// there is no hand-off left to batch, and a batch thread woken by its socket would wait out the
// time slice of whatever else holds its CPU (seen as the cancellation's tail latency).
// Returns what the threads run under, for the start-up line.
std::string prefer_batch_scheduling(bool wanted) {
  if (!wanted) return "scheduling as started (sched_batch off)";
  sched_param batch{};
  if (sched_setscheduler(0, SCHED_BATCH, &batch) != 0) return "SCHED_BATCH not available";
  return "SCHED_BATCH";
}

// What the allocator runs with: the GLIBC_TUNABLES this process started with, if any.
std::string allocator_line() {
  const char* t = std::getenv("GLIBC_TUNABLES");
  return t == nullptr ? std::string{"glibc malloc defaults"} : "GLIBC_TUNABLES " + std::string{t};
}

// tether's scheduler, whose worker k runs the k-th io runtime (actors/scheduler.cpp says why):
// one worker per io thread and no other, so that every job runs beside the sockets it touches.
// No actor blocks a worker (only main's scoped_actor blocks, on its own thread). The middleman
// (CAF's distribution layer) is loaded only where a shared budget is configured.
// (The config must outlive the actor system, which keeps a reference to it.)
void configure_actors(caf::actor_system_config& sys_cfg,
                      const std::vector<std::unique_ptr<tether::net::io_runtime>>& ios,
                      bool clustered) {
  std::vector<tether::net::io_runtime*> lent;
  for (const auto& io : ios) lent.push_back(io.get());
  tether::use_tether_scheduler(sys_cfg, lent);
  sys_cfg.set("scheduler.max-threads", ios.size());
  sys_cfg.set("logger.verbosity", caf::atom("quiet"));
  if (clustered) {
    sys_cfg.load<caf::io::middleman>();
    sys_cfg.set("middleman.heartbeat-interval", caf::timespan{tether::cluster_heartbeat});
    sys_cfg.set("middleman.connection-timeout", caf::timespan{tether::cluster_silence});
  }
}

// The actors that live as long as the gateway: this node's budget (published to the cluster when
// it hosts the shared one), the link to a budget host when it is a member, else a budget shard
// per io thread; a supervisor per io thread and the drain actor, their one clock.
struct core_actors {
  caf::actor local_budget;
  // Opened before the actors start, so that a file the ledger cannot use stops the start.
  std::shared_ptr<tether::ledger::ledger_store> ledger_store;

  // False (logged) when the shared budget cannot be published or an io thread's actors cannot be
  // started.
  bool spawn(caf::actor_system& system, const tether::runtime_ptr& shared,
             const tether::net::io_group& io) {
    using namespace tether;
    auto& rt = *shared;
    const auto& cluster = rt.cfg.cluster;
    local_budget =
        system.spawn(budget_actor, budget_limits_from(rt.cfg), rt.stats.get(), rt.timers.get());
    rt.budget = local_budget;
    if (!cluster.budget_listen.empty()) {
      auto [host, port] = split_host_port(cluster.budget_listen);
      auto published = system.middleman().publish(local_budget, port, host.c_str(), true);
      if (!published) {
        log_error("cannot publish the shared budget on " + cluster.budget_listen + ": " +
                  system.render(published.error()));
        return false;
      }
      rt.stats->export_cluster_slots();
      log_info("shared budget listening on " + host + ":" + std::to_string(*published));
    }
    if (!cluster.budget_host.empty()) {
      auto [host, port] = split_host_port(cluster.budget_host);
      rt.budget = system.spawn(budget_link_actor, local_budget, host, port, cluster.lease_idle,
                               rt.stats.get(), rt.timers.get());
    }
    if (!spawn_per_thread(system, rt, io, cluster.budget_host.empty())) return false;
    // After rt.budget is known: the drain's end is told to it (on a member, the link, which
    // tells the node's own budget too) and to every shard.
    std::vector<caf::actor> told_at_drain_end{rt.budget};
    told_at_drain_end.insert(told_at_drain_end.end(), rt.budget_shards.begin(),
                             rt.budget_shards.end());
    rt.drain = system.spawn(drain_actor, rt.cfg.server.drain_timeout, std::move(told_at_drain_end),
                            rt.supervisors, rt.timers.get());
    // Last: it subscribes to the cluster's health news through rt.budget, the link on a member.
    rt.health_monitor = system.spawn(health_actor, shared);
    rt.engine_monitor = system.spawn(engine_metrics_actor, shared);
    // On a thread of its own: its writes to the file must never stall an io thread's requests.
    if (ledger_store) {
      rt.ledger_tally = std::make_shared<ledger::ledger_tally>();
      ledger_setup setup{std::move(ledger_store),
                         rt.cfg.ledger.flush_interval,
                         rt.stats.get(),
                         rt.timers.get(),
                         {},
                         rt.ledger_tally};
      rt.ledger = system.spawn<caf::detached>(ledger_actor, std::move(setup));
    }
    // They serve every io thread: each runs where it is woken (actors/scheduler.hpp says why).
    for (const auto* a :
         {&local_budget, &rt.budget, &rt.drain, &rt.health_monitor, &rt.engine_monitor}) {
      roam(system, *a);
    }
    return true;
  }

  // Each io thread's supervisor and (`shards`: not on a cluster member, whose link leases from
  // the host) budget shard are spawned on that thread, so that they run there (an actor stays on
  // the worker that first ran it: actors/scheduler.cpp), beside the requests they serve; and the
  // thread counts its requests' metrics in a tally of its own.
  static bool spawn_per_thread(caf::actor_system& system, tether::gateway_runtime& rt,
                               const tether::net::io_group& io, bool shards) {
    using namespace tether;
    if (shards) rt.budget_shards.resize(io.size());
    rt.supervisors.resize(io.size());
    for (std::size_t i = 0; i < io.size(); ++i) {
      const bool ran = io.at(i).run_and_wait(
          [&] {
            rt.stats->bind_this_thread();
            if (shards)
              rt.budget_shards[i] = system.spawn(budget_shard_actor, rt.budget, rt.stats.get());
            rt.supervisors[i] = system.spawn<supervisor_actor>();
          },
          std::chrono::seconds(5));
      if (!ran) {
        log_error("io thread " + std::to_string(i) + " did not start its actors");
        return false;
      }
    }
    return true;
  }

  // ~actor_system waits for every actor, and these end only when told: a start that fails, or
  // the end of the shutdown, tells them. (Returning without this once hung the process, deaf to
  // SIGTERM, which the main thread blocks.) A shard ends with its budget. The runtime's handles
  // are cleared only once the actors have ended: until then one may still read them (the health
  // actor's first run reads the budget's), and a write from this thread would race that read.
  void stop(caf::actor_system& system, tether::gateway_runtime& rt) {
    std::vector<caf::actor> ending;
    for (const auto* a : {&rt.budget, &local_budget, &rt.drain, &rt.health_monitor,
                          &rt.engine_monitor, &rt.ledger}) {
      if (*a) ending.push_back(*a);
    }
    ending.insert(ending.end(), rt.supervisors.begin(), rt.supervisors.end());
    ending.insert(ending.end(), rt.budget_shards.begin(), rt.budget_shards.end());
    std::sort(ending.begin(), ending.end());
    ending.erase(std::unique(ending.begin(), ending.end()), ending.end());
    caf::scoped_actor self{system};
    std::size_t awaited = 0;
    for (const auto& a : ending) {
      if (!a) continue;
      self->monitor(a);
      ++awaited;
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    }
    // Bounded: an actor that does not end is ~actor_system's to wait for, as before.
    bool timed_out = false;
    for (std::size_t i = 0; i < awaited && !timed_out; ++i) {
      self->receive([](const caf::down_msg&) {},
                    caf::after(std::chrono::seconds(5)) >> [&timed_out] { timed_out = true; });
    }
    if (timed_out) tether::log_warn("a core actor did not end within 5 s of the stop");
    for (auto* a :
         {&rt.budget, &local_budget, &rt.drain, &rt.health_monitor, &rt.engine_monitor, &rt.ledger})
      *a = nullptr;
    rt.supervisors.clear();
    rt.budget_shards.clear();
  }
};

std::string startup_line(const tether::gateway_runtime& rt, std::uint16_t port, unsigned threads,
                         const std::string& scheduling) {
  std::string upstreams;
  for (const auto& u : rt.cfg.upstreams) upstreams += (upstreams.empty() ? "" : ", ") + u.name;
  return "tether " TETHER_VERSION " listening on " + rt.cfg.server.listen_host + ":" +
         std::to_string(port) + " (config " + rt.cfg.source_file + ", " + std::to_string(threads) +
         " io thread(s), " + scheduling + ", " + allocator_line() + ", upstreams " + upstreams +
         ")";
}

int serve(tether::config::gateway_config cfg) {
  using namespace tether;
  setup_logging(cfg.telemetry.log_format, cfg.telemetry.log_level);
  const sigset_t signals = block_stop_signals();
  const auto scheduling = prefer_batch_scheduling(cfg.server.sched_batch);
  const unsigned threads = cfg.server.threads == 0 ? usable_cpus() : cfg.server.threads;
  // Outlive the actor system: no actor may outlive the sockets it owns.
  std::vector<std::unique_ptr<net::io_runtime>> ios;
  std::vector<net::io_runtime*> members;
  for (unsigned i = 0; i < threads; ++i) {
    ios.push_back(std::make_unique<net::io_runtime>(net::io_runtime::lent_thread));
    members.push_back(ios.back().get());
  }
  const net::io_group io{members};
  const auto join_io = [&ios] {
    for (auto& each : ios) each->join();
  };
  auto rt = build_runtime(std::move(cfg), io);
  const auto& cluster = rt->cfg.cluster;
  caf::actor_system_config sys_cfg;
  configure_actors(sys_cfg, ios, !cluster.budget_listen.empty() || !cluster.budget_host.empty());
  auto system = std::make_unique<caf::actor_system>(sys_cfg);

  core_actors core;
  auto fail_start = [&] {
    core.stop(*system, *rt);
    join_io();
    system.reset();
    return 1;
  };
  if (rt->cfg.ledger.enabled) {
    try {
      core.ledger_store = std::make_shared<ledger::ledger_store>(rt->cfg.ledger_file());
    } catch (const ledger::store_error& e) {
      log_error(e.what());  // names the file and what is wrong with it
      return fail_start();
    }
  }
  if (!core.spawn(*system, rt, io)) return fail_start();

  gateway gw{*system, rt, io};
  net::http_server server{io, limits_of(rt->cfg.server),
                          [&gw](net::incoming_request req, auto channel) {
                            return gw.handle(std::move(req), std::move(channel));
                          }};
  std::uint16_t port = 0;
  try {
    port = server.listen(rt->cfg.server.listen_host, rt->cfg.server.listen_port);
  } catch (const std::exception& e) {
    log_error(e.what());  // "cannot listen on HOST:PORT: why"
    return fail_start();
  }
  log_info(startup_line(*rt, port, threads, scheduling));

  reloader reloads{*system, io, gw, rt, core.local_budget};
  const int sig = serve_until_stopped(signals, reloads);
  auto watch = std::make_shared<shutdown_watch>();
  watch_the_shutdown(signals, rt->drain, watch);
  gw.start_draining();
  // Said once the drain has begun (readiness already off): callers may act on this line.
  log_info(std::string{"received "} + (sig == SIGTERM ? "SIGTERM" : "SIGINT") + ", draining");

  // The listener stays open while draining: /readyz says 503, new model requests get 503.
  drain_and_report(*system, *rt);
  if (watch->cutting) {
    log_warn("second signal: the requests in flight were cut; exiting");
    std::fflush(nullptr);
    std::_Exit(1);
  }
  watch->teardown_ns.store(now_ns());
  server.stop_accepting();
  server.close_all();
  if (rt->tracer) rt->tracer->shutdown(std::chrono::seconds(1));
  core.stop(*system, *rt);
  // Every request tree has ended (the drain said so), so no actor owns a socket any more. The io
  // stops first; each io thread, a CAF worker, then runs the jobs left like any worker until
  // ~actor_system shuts the workers down.
  join_io();
  system.reset();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return usage(2);
  if (args[0] == "--version") {
    std::printf("tether %s\n", TETHER_VERSION);
    return 0;
  }
  if (args[0] == "--help" || args[0] == "-h") return usage(0);
  if (args[0] == "usage") return tether::run_usage_command({args.begin() + 1, args.end()});
  bool check = false;
  if (args[0] == "check") {
    check = true;
    args.erase(args.begin());
  }
  if (args.size() != 2 || args[0] != "--config") return usage(2);
  auto cfg = load_or_report(args[1]);
  if (!cfg) return 1;
  // After the config is read (it says whether to), and before anything else is started.
  if (!check) restart_with_allocator_tunables(argv, cfg->server.malloc_tcache_count);
  if (check) {
    std::fputs(tether::config::render_effective(*cfg).c_str(), stdout);
    // As comments, so that the output still loads as the same config.
    std::string routes = "\n";
    const auto described = tether::router{*cfg}.describe(*cfg);
    std::string_view text = described;
    while (!text.empty()) {
      const auto end = text.find('\n');
      routes += "# " + std::string(text.substr(0, end)) + "\n";
      text.remove_prefix(end + 1);
    }
    std::fputs(routes.c_str(), stdout);
    return 0;
  }
  return serve(std::move(*cfg));
}
