// Scenario 7: a shared budget across nodes (issue #7). The same closed loop as scenario 1, at
// concurrency 1 and 16, through the standalone tether (slots from its own budget actor), through
// a member node of a budget host (CAF's middleman, loopback) as configured by default (slots are
// leased: a warm member acquires locally), and, when given, through a member that keeps no
// leases (lease_idle_ms = 0: every acquire is a round trip to the host). The differences are
// what the shared budget adds to a request, and what one remote acquire costs.
#include <map>

#include <boost/json.hpp>

#include "bench/bench/closed_loop.hpp"
#include "bench/bench/percentiles.hpp"
#include "bench/bench/scenarios.hpp"

namespace tether::bench {

boost::json::object run_shared_budget(bench_context& ctx) {
  namespace json = boost::json;
  const target* local = ctx.find("tether");
  const auto& member = ctx.options().cluster_member;
  if (local == nullptr || !member) {
    return {{"name", "shared_budget"}, {"skipped", "needs the tether target and --cluster-member"}};
  }
  const bool quick = ctx.options().quick;
  const std::size_t rounds = quick ? 2 : 4;
  const milliseconds slice{quick ? 750 : 2000};
  const unsigned levels[] = {1, 16};
  const double limit_ms = 0.5;
  std::vector<const target*> both{local, &*member};
  const auto& cold = ctx.options().cluster_member_cold;
  if (cold) both.push_back(&*cold);

  warm_up(ctx, both, 4);  // connections, and the member's link to the budget host

  json::object targets;
  json::object derived;
  json::array checks;
  for (unsigned c : levels) {
    auto samples = sample_level(ctx, both, c, rounds, slice);
    json::object level;
    std::map<std::string, summary> sums;
    for (const auto* t : both) {
      sums[t->name] = summarize(samples.latencies_ms[t->name]);
      auto o = to_json(sums[t->name]);
      o["throughput_rps"] = std::round(samples.rps(t->name));
      o["failed"] = samples.failed[t->name];
      level[t->name] = std::move(o);
    }
    targets["c" + std::to_string(c)] = std::move(level);
    const auto& l = sums[local->name];
    const auto& m = sums[member->name];
    double added_p50 = m.p50 - l.p50;
    double added_p99 = m.p99 - l.p99;
    auto rounded = [](double ms) { return std::round(ms * 1000) / 1000; };
    json::object d{{"member_added_p50_ms", rounded(added_p50)},
                   {"member_added_p99_ms", rounded(added_p99)}};
    if (cold) {
      const auto& k = sums[cold->name];
      d["remote_acquire_added_p50_ms"] = rounded(k.p50 - l.p50);
      d["remote_acquire_added_p99_ms"] = rounded(k.p99 - l.p99);
    }
    derived["c" + std::to_string(c)] = std::move(d);
    if (c == 1) {
      bool measured = l.n > 0 && m.n > 0 && samples.failed[member->name] == 0;
      checks.push_back(check("tether-member", "shared budget: added p99 latency (ms), c=1",
                             added_p99, "<= 0.5", measured && added_p99 <= limit_ms));
    }
  }
  return {{"name", "shared_budget"},
          {"config",
           {{"model", bench_models::immediate},
            {"rounds", rounds},
            {"slice_ms", slice.count()},
            {"member", member->endpoint.address().to_string() + ":" +
                           std::to_string(member->endpoint.port())}}},
          {"targets", std::move(targets)},
          {"derived", std::move(derived)},
          {"checks", std::move(checks)}};
}

}  // namespace tether::bench
