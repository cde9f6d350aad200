// Scenario 8: one of three deployments dead (issue #29). One model on three upstreams, closed
// loop at a modest concurrency, through three tether nodes of the same shape (replica_config):
// all three deployments live (the baseline), the third refusing connections with ejection off
// (every attempt drawn onto it fails and is retried elsewhere), and the same with ejection on
// (after replica_shape::eject_after_failures failures it gets nothing for the rest of the run).
// Wasted attempts are tether's own count of refused attempts on the dead upstream. The nodes
// take turns, the order rotating every round; the first slice of each node's first round is cut
// in two, so that the requests around the ejection can be told from the ones after it.
#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include <boost/json.hpp>

#include "bench/bench/closed_loop.hpp"
#include "bench/bench/percentiles.hpp"
#include "bench/bench/scenarios.hpp"

namespace tether::bench {
namespace {

namespace json = boost::json;

// What tether's /metrics says of the dead upstream (and of retries refused by the retry budget,
// which would turn a failover into a failure).
struct dead_counts {
  bool read = false;
  double refused = 0;  // tether_upstream_attempts_total{upstream="dead",outcome="upstream_failed"}
  double any_outcome = 0;      // every attempt on the dead upstream
  double ejections = 0;        // tether_upstream_ejections_total{upstream="dead"}, every reason
  double healthy = 1;          // tether_upstream_healthy{upstream="dead"}
  double retries_refused = 0;  // tether_retries_total{result="budget_exhausted"}, every upstream
};

// The sum of the samples of `name` whose labels include every one of `labels`.
double metric_sum(const std::string& body, const std::string& name,
                  std::initializer_list<std::string_view> labels) {
  std::istringstream in(body);
  std::string line;
  double sum = 0;
  const std::string prefix = name + "{";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    const auto close = line.find('}');
    if (close == std::string::npos) continue;
    const std::string_view label_text = std::string_view(line).substr(0, close);
    bool all = std::all_of(labels.begin(), labels.end(), [&](std::string_view l) {
      return label_text.find(l) != std::string_view::npos;
    });
    if (all) sum += std::stod(line.substr(close + 1));
  }
  return sum;
}

dead_counts read_dead(const target& t) {
  dead_counts out;
  auto r = http_call(t.endpoint, "GET", "/metrics");
  if (!r || r->status != 200) return out;
  const std::string dead = std::string("upstream=\"") + replica_shape::dead_upstream + "\"";
  out.read = true;
  out.refused =
      metric_sum(r->body, "tether_upstream_attempts_total", {dead, "outcome=\"upstream_failed\""});
  out.any_outcome = metric_sum(r->body, "tether_upstream_attempts_total", {dead});
  out.ejections = metric_sum(r->body, "tether_upstream_ejections_total", {dead});
  // The healthy baseline has no dead upstream: nothing to be out of service.
  out.healthy = r->body.find("tether_upstream_healthy{" + dead) == std::string::npos
                    ? 1
                    : metric_sum(r->body, "tether_upstream_healthy", {dead});
  out.retries_refused =
      metric_sum(r->body, "tether_retries_total", {"result=\"budget_exhausted\""});
  return out;
}

struct phase {
  std::string name;
  const target* node = nullptr;
  std::size_t requests = 0, ok = 0, failed = 0;
  double seconds = 0;
  std::vector<double> all_ms, head_ms, rest_ms;  // 2xx answers only
  dead_counts before, after_head, after;
};

void add(phase& p, const closed_loop_result& res, std::vector<double>& part) {
  p.requests += res.results.size() + res.unfinished;
  p.ok += res.ok;
  p.failed += res.failed + res.unfinished;
  p.seconds += res.elapsed_s;
  for (const auto& e : res.results) {
    if (e.ok && e.status >= 200 && e.status < 300) {
      part.push_back(e.latency_ms);
      p.all_ms.push_back(e.latency_ms);
    }
  }
}

double rounded(double v, double scale = 1000) {
  return std::round(v * scale) / scale;
}

}  // namespace

boost::json::object run_dead_replica(bench_context& ctx) {
  const auto& o = ctx.options();
  if (!o.replicas_healthy || !o.replicas_dead || !o.replicas_ejecting) {
    return {{"name", "dead_replica"},
            {"skipped", "needs --replicas-healthy, --replicas-dead and --replicas-ejecting"}};
  }
  const bool quick = o.quick;
  const unsigned concurrency = 4;
  const std::size_t rounds = quick ? 2 : 4;
  const std::size_t per_slice = quick ? 1000 : 2500;
  // The ejection comes within the first few dozen requests (eject_after_failures failures, a
  // third or more of the first attempts being drawn onto the dead upstream).
  const std::size_t head = 100;
  const double p99_limit = 1.5;

  std::vector<phase> phases(3);
  phases[0].name = "healthy";
  phases[0].node = &*o.replicas_healthy;
  phases[1].name = "dead_no_ejection";
  phases[1].node = &*o.replicas_dead;
  phases[2].name = "dead_ejecting";
  phases[2].node = &*o.replicas_ejecting;

  // Warms the client and upstream connections through the model on the live upstreams only.
  std::vector<const target*> nodes;
  for (const auto& p : phases) nodes.push_back(p.node);
  warm_up(ctx, nodes, concurrency);
  for (auto& p : phases) p.before = read_dead(*p.node);

  auto loop = [&](phase& p, std::size_t n, std::vector<double>& part) {
    auto req = ctx.request(*p.node, bench_models::replicated, false);
    add(p,
        run_closed_loop(ctx, *p.node,
                        {concurrency, milliseconds(60000), n, [&](std::size_t) { return req; }}),
        part);
  };
  for (std::size_t r = 0; r < rounds && !ctx.out_of_time(); ++r) {
    for (std::size_t i = 0; i < phases.size(); ++i) {
      auto& p = phases[(i + r) % phases.size()];
      if (r == 0) {
        loop(p, head, p.head_ms);
        p.after_head = read_dead(*p.node);
        loop(p, per_slice - head, p.rest_ms);
      } else {
        loop(p, per_slice, p.rest_ms);
      }
    }
  }
  for (auto& p : phases) p.after = read_dead(*p.node);

  json::object targets;
  std::map<std::string, summary> sums;
  for (auto& p : phases) {
    sums[p.name] = summarize(p.all_ms);
    auto t = to_json(sums[p.name]);
    t["requests"] = p.requests;
    t["successes"] = p.ok;
    t["failed"] = p.failed;
    t["throughput_rps"] = p.seconds > 0 ? std::round(static_cast<double>(p.ok) / p.seconds) : 0;
    t["first_requests"] = to_json(summarize(p.head_ms));
    t["later_requests"] = to_json(summarize(p.rest_ms));
    const bool read = p.before.read && p.after_head.read && p.after.read;
    t["metrics_read"] = read;
    if (read) {
      const double wasted = p.after.refused - p.before.refused;
      t["wasted_attempts"] = wasted;
      t["wasted_attempts_first_requests"] = p.after_head.refused - p.before.refused;
      t["wasted_attempts_later_requests"] = p.after.refused - p.after_head.refused;
      t["wasted_per_request"] =
          p.requests > 0 ? rounded(wasted / static_cast<double>(p.requests), 1e5) : 0;
      t["dead_attempts_any_outcome"] = p.after.any_outcome - p.before.any_outcome;
      t["ejections"] = p.after.ejections - p.before.ejections;
      t["ejections_in_first_requests"] = p.after_head.ejections - p.before.ejections;
      t["dead_healthy_at_end"] = p.after.healthy;
      t["retries_refused_by_budget"] = p.after.retries_refused - p.before.retries_refused;
    }
    targets[p.name] = std::move(t);
  }

  const auto& base = sums["healthy"];
  json::object derived;
  for (const char* name : {"dead_no_ejection", "dead_ejecting"}) {
    if (base.p99 > 0) {
      derived[std::string(name) + "_p99_over_healthy"] = rounded(sums[name].p99 / base.p99, 100);
    }
    if (base.p50 > 0) {
      derived[std::string(name) + "_p50_over_healthy"] = rounded(sums[name].p50 / base.p50, 100);
    }
  }

  json::array checks;
  for (const auto& p : phases) {
    // With ejection off a few requests may fail (their retry refused by the retry budget when
    // several hit the live upstreams at once): that phase is the picture without ejection, its
    // successes a figure, not a target.
    if (&p == &phases[1]) continue;
    checks.push_back(check(
        p.node->name,
        "dead replica: " + p.name + ": successes of " + std::to_string(p.requests) + " requests",
        static_cast<double>(p.ok), "== requests", p.requests > 0 && p.ok == p.requests));
  }
  {
    const auto& p = phases[2];
    const bool read = p.before.read && p.after.read;
    const double wasted = p.after.refused - p.before.refused;
    const double ejections = p.after.ejections - p.before.ejections;
    // An ejection period is one ejection, and the stretch in service after the last one ended
    // (if it did) is another: each may waste eject_after_failures attempts, plus those already
    // on their way when the ejection came (at most concurrency - 1), which fail uncounted.
    const double periods = std::max(1.0, ejections + (p.after.healthy > 0 ? 1 : 0));
    const double per_period = replica_shape::eject_after_failures + (concurrency - 1);
    const double limit = per_period * periods;
    if (read) {
      derived["dead_ejecting_ejection_periods"] = periods;
      derived["dead_ejecting_wasted_over_threshold"] =
          wasted - replica_shape::eject_after_failures * periods;
    }
    checks.push_back(check(p.node->name, "dead replica, ejection on: wasted attempts", wasted,
                           "<= (" + std::to_string(replica_shape::eject_after_failures) + " + " +
                               std::to_string(concurrency - 1) + " on their way) x " +
                               std::to_string(static_cast<int>(periods)) + " ejection period(s)",
                           read && wasted <= limit));
    const double ratio = base.p99 > 0 ? sums[p.name].p99 / base.p99 : 0;
    checks.push_back(check(p.node->name, "dead replica, ejection on: p99 / healthy p99", ratio,
                           "<= 1.5", base.n > 0 && sums[p.name].n > 0 && ratio <= p99_limit));
  }
  return {{"name", "dead_replica"},
          {"config",
           {{"model", bench_models::replicated},
            {"deployments", 3},
            {"concurrency", concurrency},
            {"rounds", rounds},
            {"requests_per_slice", per_slice},
            {"first_requests", head},
            {"max_retries", replica_shape::max_retries},
            {"retry_backoff_ms", replica_shape::retry_backoff_ms},
            {"eject_after_failures", replica_shape::eject_after_failures},
            {"eject_base_ms", replica_shape::eject_base_ms}}},
          {"targets", std::move(targets)},
          {"derived", std::move(derived)},
          {"checks", std::move(checks)}};
}

}  // namespace tether::bench
