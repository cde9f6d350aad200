// Scenario 5: an upstream capped at N slots, 4N callers in a closed loop, each request 20 ms of
// upstream work. The mock counts what really runs at once: its peak must be N exactly. Slot
// utilisation is the upstream busy time over N × the run's span; queue wait is the mock's start
// of a request minus the caller's send. tether only: no other target has a budget.
#include <algorithm>
#include <cmath>
#include <map>

#include <boost/json.hpp>

#include "bench/bench/closed_loop.hpp"
#include "bench/bench/percentiles.hpp"
#include "bench/bench/scenarios.hpp"

namespace tether::bench {

boost::json::object run_budget(bench_context& ctx) {
  namespace json = boost::json;
  const bool quick = ctx.options().quick;
  const unsigned cap = ctx.options().budget_cap;
  const milliseconds duration{quick ? 1500 : 5000};
  const target* t = ctx.find("tether");
  if (t == nullptr) return {{"name", "budget"}, {"skipped", "no tether target"}};

  ctx.mock().reset();
  std::vector<std::string> ids;
  std::map<std::string, double> sent_at;
  auto res = run_closed_loop(ctx, *t, {4 * cap, duration, 15000, [&](std::size_t k) {
                                         if (ids.size() <= k) ids.resize(k + 1);
                                         ids[k] = ctx.next_request_id("budget");
                                         // exchange() stamps its send right after this returns.
                                         sent_at[ids[k]] = epoch_ms_now();
                                         return ctx.request(*t, bench_models::capped_work, false,
                                                            {"x-request-id: " + ids[k]});
                                       }});
  auto stats = ctx.mock().stats();
  auto peak = stats.at("max_active").to_number<std::uint64_t>();
  auto log = mock_log_by_request_id(stats);

  std::vector<double> queue_wait, latency;
  for (const auto& r : res.results) {
    if (r.ok && r.status == 200) latency.push_back(r.latency_ms);
  }
  double busy_ms = 0, first = 1e300, last = 0;
  std::size_t matched = 0;
  for (const auto& id : ids) {
    auto it = log.find(id);
    if (it == log.end()) continue;
    const auto& rec = it->second;
    if (rec.at("ended_ms").is_null()) continue;
    double s = rec.at("started_ms").to_number<double>();
    double e = rec.at("ended_ms").to_number<double>();
    busy_ms += e - s;
    // Includes the proxy's own forwarding time (small next to the wait; see the overhead
    // scenario).
    queue_wait.push_back(s - sent_at[id]);
    first = std::min(first, s);
    last = std::max(last, e);
    ++matched;
  }
  double span = last > first ? last - first : 0;
  double utilisation = span > 0 ? busy_ms / (cap * span) : 0;
  json::array checks;
  checks.push_back(check("tether", "observed upstream peak concurrency", static_cast<double>(peak),
                         "== " + std::to_string(cap), peak == cap));
  return {{"name", "budget"},
          {"config",
           {{"model", bench_models::capped_work},
            {"cap", cap},
            {"callers", 4 * cap},
            {"work_ms", bench_models::capped_work_ms},
            {"duration_ms", duration.count()}}},
          {"targets",
           {{"tether",
             {{"requests_ok", res.ok},
              {"failed", res.failed + res.unfinished},
              {"observed_peak", peak},
              {"slot_utilisation", std::round(utilisation * 1000) / 1000},
              {"matched_in_mock_log", matched},
              {"latency_ms", to_json(summarize(latency))},
              {"queue_wait_ms", to_json(summarize(queue_wait))}}}}},
          {"checks", std::move(checks)}};
}

}  // namespace tether::bench
