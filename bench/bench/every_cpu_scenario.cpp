// Scenario 11: the proxies given every CPU (issue #27). nginx with a worker per CPU and a tether
// left unpinned (a CAF worker per CPU), each started by bench/run.sh beside the pinned pair, take
// turns with the pinned nginx and tether under the same closed loops. Per target: throughput, CPU
// per request, and the busiest thread's share of the process's CPU (nginx's workers are
// processes: its busiest worker's share of the whole tree). The load generator and the mock keep
// their one CPU, which the unpinned proxies share with them.
#include <dirent.h>
#include <unistd.h>

#include <cmath>
#include <map>

#include <boost/json.hpp>

#include "bench/bench/closed_loop.hpp"
#include "bench/bench/percentiles.hpp"
#include "bench/bench/scenarios.hpp"

namespace tether::bench {
namespace {

namespace json = boost::json;

// Every thread of the target's process tree (nginx's workers are its master's children), by
// thread id: its CPU seconds so far.
std::map<int, double> threads_cpu_seconds(const bench_context& ctx, const target& t) {
  std::map<int, double> out;
  for (int p : ctx.process_tree(t)) {
    const std::string dir = "/proc/" + std::to_string(p) + "/task";
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) continue;
    while (const dirent* e = readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      if (auto times = cpu_times_of(dir + "/" + e->d_name + "/stat")) {
        out[std::stoi(e->d_name)] = times->first + times->second;
      }
    }
    closedir(d);
  }
  return out;
}

struct figures {
  std::size_t ok = 0, failed = 0;
  double seconds = 0;
  double cpu_s = 0;             // every thread's CPU over the loops
  double busiest_thread_s = 0;  // the busiest thread's, summed over the loops
  std::vector<double> latencies_ms;
};

}  // namespace

json::object run_every_cpu(bench_context& ctx) {
  const auto& o = ctx.options();
  if (!o.every_cpu_nginx || !o.every_cpu_tether) {
    return {{"name", "every_cpu"}, {"skipped", "needs --every-cpu-nginx and --every-cpu-tether"}};
  }
  std::vector<const target*> targets{ctx.find("nginx"), ctx.find("tether"), &*o.every_cpu_nginx,
                                     &*o.every_cpu_tether};
  for (const auto* t : targets) {
    if (t == nullptr || !t->pid) {
      return {{"name", "every_cpu"}, {"skipped", "needs nginx and tether targets with pids"}};
    }
  }
  const bool quick = o.quick;
  const std::vector<unsigned> levels =
      quick ? std::vector<unsigned>{64} : std::vector<unsigned>{16, 256};
  const std::size_t rounds = quick ? 1 : 3;
  const milliseconds slice{quick ? 1000 : 3000};

  json::object by_level;
  json::array checks;
  for (unsigned c : levels) {
    warm_up(ctx, targets, c);
    std::map<std::string, figures> figs;
    for (std::size_t r = 0; r < rounds && !ctx.out_of_time(); ++r) {
      for (std::size_t i = 0; i < targets.size(); ++i) {
        const target& t = *targets[(i + r) % targets.size()];
        auto req = ctx.request(t, bench_models::immediate, false);
        const auto before = threads_cpu_seconds(ctx, t);
        auto res = run_closed_loop(ctx, t, {c, slice, 2'000'000, [&](std::size_t) { return req; }});
        const auto after = threads_cpu_seconds(ctx, t);
        auto& f = figs[t.name];
        double total = 0, busiest = 0;
        for (const auto& [tid, s] : after) {
          const auto it = before.find(tid);
          const double used = s - (it == before.end() ? 0.0 : it->second);
          total += used;
          busiest = std::max(busiest, used);
        }
        f.cpu_s += total;
        f.busiest_thread_s += busiest;
        f.ok += res.ok;
        f.failed += res.failed + res.unfinished;
        f.seconds += res.elapsed_s;
        for (const auto& e : res.results) {
          if (e.ok && e.status == 200) f.latencies_ms.push_back(e.latency_ms);
        }
      }
    }
    json::object level;
    std::map<std::string, double> rps, cpu_us;
    for (const auto* t : targets) {
      const auto& f = figs[t->name];
      rps[t->name] = f.seconds > 0 ? static_cast<double>(f.ok) / f.seconds : 0;
      cpu_us[t->name] = f.ok > 0 ? f.cpu_s / static_cast<double>(f.ok) * 1e6 : 0;
      const double share = f.cpu_s > 0 ? f.busiest_thread_s / f.cpu_s : 0;
      level[t->name] = {
          {"ok", f.ok},
          {"failed", f.failed},
          {"throughput_rps", std::round(rps[t->name])},
          {"cpu_us_per_request", std::round(cpu_us[t->name] * 10) / 10},
          {"cpu_share_of_one_cpu", f.seconds > 0 ? std::round(f.cpu_s / f.seconds * 100) / 100 : 0},
          {"busiest_thread_share", std::round(share * 1000) / 1000},
          {"latency_ms", to_json(summarize(f.latencies_ms))}};
    }
    const std::string& nginx_all = o.every_cpu_nginx->name;
    const std::string& tether_all = o.every_cpu_tether->name;
    auto ratio = [](double a, double b) { return b > 0 ? std::round(a / b * 1000) / 1000 : 0.0; };
    const double ratio_one = ratio(rps["tether"], rps["nginx"]);
    const double ratio_all = ratio(rps[tether_all], rps[nginx_all]);
    level["derived"] = {
        {"tether_throughput_every_cpu_over_one_cpu", ratio(rps[tether_all], rps["tether"])},
        {"tether_over_nginx_one_cpu", ratio_one},
        {"tether_over_nginx_every_cpu", ratio_all},
        {"tether_cpu_per_request_every_cpu_over_one_cpu",
         ratio(cpu_us[tether_all], cpu_us["tether"])}};
    const std::string at = ", c=" + std::to_string(c);
    const auto& ta = level[tether_all].as_object();
    const double share = ta.at("busiest_thread_share").to_number<double>();
    checks.push_back(check(tether_all, "busiest thread's share of the process's CPU" + at, share,
                           "<= 0.60", share > 0 && share <= 0.60));
    checks.push_back(check(tether_all, "throughput on every CPU / on one CPU" + at,
                           ratio(rps[tether_all], rps["tether"]), ">= 1",
                           rps["tether"] > 0 && rps[tether_all] >= rps["tether"]));
    checks.push_back(check(
        tether_all, "throughput / nginx's, every CPU, against the same on one" + at, ratio_all,
        ">= " + std::to_string(ratio_one).substr(0, 5), ratio_one > 0 && ratio_all >= ratio_one));
    const double cpu_ratio = ratio(cpu_us[tether_all], cpu_us["tether"]);
    checks.push_back(check(tether_all, "CPU per request on every CPU / on one CPU" + at, cpu_ratio,
                           "<= 1.15", cpu_ratio > 0 && cpu_ratio <= 1.15));
    by_level["c" + std::to_string(c)] = std::move(level);
  }
  return {{"name", "every_cpu"},
          {"config",
           {{"model", bench_models::immediate},
            {"concurrency", json::value_from(levels)},
            {"rounds", rounds},
            {"slice_ms", slice.count()},
            {"cpus", sysconf(_SC_NPROCESSORS_ONLN)}}},
          {"levels", std::move(by_level)},
          {"checks", std::move(checks)}};
}

}  // namespace tether::bench
