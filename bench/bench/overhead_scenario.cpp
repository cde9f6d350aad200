// Scenario 1: non-streaming chat, the mock answering at once, closed loop at concurrency 1, 16
// and 64. What a proxy adds is its latency over the direct path at the same concurrency.
#include <map>

#include <boost/json.hpp>

#include "bench/bench/closed_loop.hpp"
#include "bench/bench/percentiles.hpp"
#include "bench/bench/scenarios.hpp"

namespace tether::bench {

boost::json::object check(const std::string& target, const std::string& what, double value,
                          const std::string& limit, bool met) {
  return {{"target", target},
          {"what", what},
          {"value", std::round(value * 1000) / 1000},
          {"limit", limit},
          {"met", met}};
}

boost::json::object run_overhead(bench_context& ctx) {
  namespace json = boost::json;
  const bool quick = ctx.options().quick;
  const std::size_t rounds = quick ? 1 : 3;
  const milliseconds slice{quick ? 1000 : 3000};
  const unsigned levels[] = {1, 16, 64};

  // Warm-up: connections, pools and caches of every target, not measured.
  for (const auto* t : ctx.rotation(0)) {
    auto req = ctx.request(*t, bench_models::immediate, false);
    run_closed_loop(ctx, *t, {16, milliseconds(300), 100000, [&](std::size_t) { return req; }});
  }

  json::object targets;
  json::object derived;
  json::array checks;
  for (unsigned c : levels) {
    std::map<std::string, std::vector<double>> latencies;
    std::map<std::string, std::size_t> ok, failed;
    std::map<std::string, double> seconds;
    for (std::size_t r = 0; r < rounds && !ctx.out_of_time(); ++r) {
      for (const auto* t : ctx.rotation(r)) {
        auto req = ctx.request(*t, bench_models::immediate, false);
        auto res =
            run_closed_loop(ctx, *t, {c, slice, 2'000'000, [&](std::size_t) { return req; }});
        for (const auto& e : res.results) {
          if (e.ok && e.status == 200) latencies[t->name].push_back(e.latency_ms);
        }
        ok[t->name] += res.ok;
        failed[t->name] += res.failed + res.unfinished;
        seconds[t->name] += res.elapsed_s;
      }
    }
    json::object level;
    std::map<std::string, summary> sums;
    std::map<std::string, double> rps;
    for (const auto& t : ctx.targets()) {
      sums[t.name] = summarize(latencies[t.name]);
      rps[t.name] = seconds[t.name] > 0 ? static_cast<double>(ok[t.name]) / seconds[t.name] : 0;
      auto o = to_json(sums[t.name]);
      o["throughput_rps"] = std::round(rps[t.name]);
      o["failed"] = failed[t.name];
      level[t.name] = std::move(o);
    }
    targets["c" + std::to_string(c)] = std::move(level);

    json::object d;
    const auto& direct = sums["direct"];
    for (const char* p : {"nginx", "tether"}) {
      d[std::string(p) + "_added_p50_ms"] = std::round((sums[p].p50 - direct.p50) * 1000) / 1000;
      d[std::string(p) + "_added_p99_ms"] = std::round((sums[p].p99 - direct.p99) * 1000) / 1000;
    }
    double nginx_added = sums["nginx"].p50 - direct.p50;
    double tether_added = sums["tether"].p50 - direct.p50;
    double ratio = nginx_added > 0 ? tether_added / nginx_added : 0;
    double tput = rps["nginx"] > 0 ? rps["tether"] / rps["nginx"] : 0;
    d["added_p50_ratio_tether_over_nginx"] = std::round(ratio * 100) / 100;
    d["throughput_ratio_tether_over_nginx"] = std::round(tput * 1000) / 1000;
    derived["c" + std::to_string(c)] = std::move(d);
    if (c == 16) {
      checks.push_back(check("tether", "added p50 latency / nginx's, c=16", ratio, "<= 1.5",
                             nginx_added > 0 && ratio <= 1.5));
      checks.push_back(check("tether", "throughput / nginx's, c=16", tput, ">= 0.60", tput >= 0.6));
    }
  }
  return {{"name", "overhead"},
          {"config",
           {{"model", bench_models::immediate},
            {"concurrency", {1, 16, 64}},
            {"rounds", rounds},
            {"slice_ms", slice.count()},
            {"loop", "closed, keep-alive"}}},
          {"targets", std::move(targets)},
          {"derived", std::move(derived)},
          {"checks", std::move(checks)}};
}

}  // namespace tether::bench
