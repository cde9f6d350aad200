// Scenario 2: streams of 20 events, one every 10 ms, 16 at a time. Time to first event (the
// first byte of work the caller can use) and the gaps between events, through each target. A
// proxy that held events back would show it in both: a late first event, bunched gaps.
#include <cmath>
#include <map>

#include <boost/json.hpp>

#include "bench/bench/closed_loop.hpp"
#include "bench/bench/percentiles.hpp"
#include "bench/bench/scenarios.hpp"

namespace tether::bench {

boost::json::object run_streaming(bench_context& ctx) {
  namespace json = boost::json;
  const bool quick = ctx.options().quick;
  const std::size_t rounds = quick ? 1 : 3;
  const milliseconds slice{quick ? 1000 : 3000};
  const unsigned concurrency = 16;
  const double interval = bench_models::stream_interval_ms;

  std::map<std::string, std::vector<double>> ttfb, head, gaps, jitter;
  std::map<std::string, std::size_t> streams, failed, short_streams;
  for (std::size_t r = 0; r < rounds && !ctx.out_of_time(); ++r) {
    for (const auto* t : ctx.rotation(r)) {
      auto req = ctx.request(*t, bench_models::stream, true);
      auto res = run_closed_loop(ctx, *t,
                                 {concurrency, slice, 1'000'000, [&](std::size_t) { return req; }});
      failed[t->name] += res.failed + res.unfinished;
      for (const auto& e : res.results) {
        if (!e.ok || e.status != 200) continue;
        ++streams[t->name];
        if (e.event_ms.size() != 20) ++short_streams[t->name];
        if (e.head_ms) head[t->name].push_back(*e.head_ms);
        if (!e.event_ms.empty()) ttfb[t->name].push_back(e.event_ms.front());
        for (std::size_t i = 1; i < e.event_ms.size(); ++i) {
          double gap = e.event_ms[i] - e.event_ms[i - 1];
          gaps[t->name].push_back(gap);
          jitter[t->name].push_back(std::abs(gap - interval));
        }
      }
    }
  }

  json::object targets;
  std::map<std::string, summary> ttfb_sum;
  for (const auto& t : ctx.targets()) {
    ttfb_sum[t.name] = summarize(ttfb[t.name]);
    targets[t.name] = {{"streams", streams[t.name]},
                       {"failed", failed[t.name]},
                       {"streams_missing_events", short_streams[t.name]},
                       {"head_ms", to_json(summarize(head[t.name]))},
                       {"ttfb_ms", to_json(ttfb_sum[t.name])},
                       {"gap_ms", to_json(summarize(gaps[t.name]))},
                       {"gap_jitter_ms", to_json(summarize(jitter[t.name]))}};
  }
  json::object derived;
  json::array checks;
  for (const char* p : {"nginx", "tether"}) {
    double added50 = ttfb_sum[p].p50 - ttfb_sum["direct"].p50;
    double added99 = ttfb_sum[p].p99 - ttfb_sum["direct"].p99;
    derived[std::string(p) + "_added_ttfb_p50_ms"] = std::round(added50 * 1000) / 1000;
    derived[std::string(p) + "_added_ttfb_p99_ms"] = std::round(added99 * 1000) / 1000;
    // Relaying event by event: the first event is not held back by as much as one interval.
    checks.push_back(check(p, "added TTFB p50 (ms), events relayed as they come", added50,
                           "< one event interval (10 ms)", added50 < interval));
  }
  return {{"name", "streaming"},
          {"config",
           {{"model", bench_models::stream},
            {"events", 20},
            {"interval_ms", interval},
            {"concurrency", concurrency},
            {"rounds", rounds},
            {"slice_ms", slice.count()}}},
          {"targets", std::move(targets)},
          {"derived", std::move(derived)},
          {"checks", std::move(checks)}};
}

}  // namespace tether::bench
