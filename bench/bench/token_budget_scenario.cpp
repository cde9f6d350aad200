// Scenario 9: token-weighted admission against a server with a KV budget (issue #30). The mix
// of bench/bench/token_mix.hpp, a closed loop of token_mix::callers, through two tether nodes
// taking turns: one holding each request's token weight against max_tokens_in_flight = the
// mock's budget, one capping requests in flight at the budget over the mix's mean weight (what
// an operator without token weighting would set). The mock (mock-kv-<budget>-<ms>) answers 503
// at once to a request that does not fit beside the ones at work and counts it: its count
// through each node, read from /_stats after each slice (the mock is reset before it), is the
// figure. Latencies and throughput count 2xx answers only.
#include <algorithm>
#include <cmath>
#include <map>

#include <boost/json.hpp>

#include "bench/bench/closed_loop.hpp"
#include "bench/bench/percentiles.hpp"
#include "bench/bench/scenarios.hpp"
#include "bench/bench/token_mix.hpp"

namespace tether::bench {
namespace {

namespace json = boost::json;

struct node_phase {
  std::string name;
  const target* node = nullptr;
  std::size_t next_k = 0;  // the mix's sequence runs on across the node's slices
  std::size_t requests = 0, ok = 0, failed = 0;
  // The failures' statuses as the callers saw them (tether answers a server's 503 with 502
  // upstream_failed); 0: no response (unfinished, or the connection failed).
  std::map<unsigned, std::size_t> failed_by_status;
  std::size_t long_requests = 0, long_ok = 0;
  double seconds = 0;
  double tokens_served = 0;                       // the weights of the 2xx answers
  std::vector<double> all_ms, short_ms, long_ms;  // 2xx answers only
  bool mock_read = true;
  std::uint64_t kv_admitted = 0, kv_over_budget = 0, kv_peak = 0, kv_peak_demand = 0;
  std::uint64_t kv_left_in_flight = 0;  // after a slice's last answer: a release was missed
};

std::uint64_t counter(const json::value& stats, std::string_view key) {
  const auto* v = stats.as_object().if_contains(key);
  return v != nullptr && v->is_number() ? v->to_number<std::uint64_t>() : 0;
}

double rounded(double v, double scale = 1000) {
  return std::round(v * scale) / scale;
}

}  // namespace

boost::json::object run_token_budget(bench_context& ctx) {
  const auto& o = ctx.options();
  if (!o.tokens_node || !o.slots_node) {
    return {{"name", "token_budget"}, {"skipped", "needs --tokens-node and --slots-node"}};
  }
  const bool quick = o.quick;
  const std::size_t rounds = quick ? 1 : 3;
  const milliseconds slice{quick ? 2000 : 6000};
  const unsigned callers = token_mix::callers;

  std::vector<node_phase> phases(2);
  phases[0].name = "tokens";
  phases[0].node = &*o.tokens_node;
  phases[1].name = "slots";
  phases[1].node = &*o.slots_node;

  std::vector<const target*> nodes;
  for (const auto& p : phases) nodes.push_back(p.node);
  warm_up(ctx, nodes, callers);

  for (std::size_t r = 0; r < rounds && !ctx.out_of_time(); ++r) {
    for (std::size_t i = 0; i < phases.size(); ++i) {
      auto& p = phases[(i + r) % phases.size()];
      const auto host =
          p.node->endpoint.address().to_string() + ":" + std::to_string(p.node->endpoint.port());
      std::map<std::uint64_t, std::shared_ptr<const std::string>> requests;
      auto request_for = [&](std::uint64_t max_tokens) {
        auto& req = requests[max_tokens];
        if (!req) req = make_request(host, "/v1/chat/completions", token_mix_body(max_tokens));
        return req;
      };
      ctx.mock().reset();
      const std::size_t first_k = p.next_k;
      auto res =
          run_closed_loop(ctx, *p.node, {callers, slice, 10'000'000, [&](std::size_t k) {
                                           return request_for(token_mix_max_tokens(first_k + k));
                                         }});
      for (std::size_t j = 0; j < res.results.size(); ++j) {
        const auto& e = res.results[j];
        const auto k = first_k + res.request_index[j];
        const bool is_long = token_mix_is_long(k);
        const bool ok = e.ok && e.status >= 200 && e.status < 300;
        p.long_requests += is_long ? 1 : 0;
        if (ok) {
          ++p.ok;
          p.long_ok += is_long ? 1 : 0;
          p.tokens_served += static_cast<double>(token_mix_weight(token_mix_max_tokens(k)));
          p.all_ms.push_back(e.latency_ms);
          (is_long ? p.long_ms : p.short_ms).push_back(e.latency_ms);
        } else {
          ++p.failed;
          ++p.failed_by_status[e.ok ? e.status : 0];
        }
      }
      p.requests += res.results.size() + res.unfinished;
      p.failed += res.unfinished;
      if (res.unfinished > 0) p.failed_by_status[0] += res.unfinished;
      p.next_k = first_k + res.results.size() + res.unfinished;
      p.seconds += res.elapsed_s;
      try {
        const auto stats = ctx.mock().counters();
        p.kv_admitted += counter(stats, "kv_admitted");
        p.kv_over_budget += counter(stats, "kv_over_budget");
        p.kv_peak = std::max(p.kv_peak, counter(stats, "kv_peak_tokens"));
        p.kv_peak_demand = std::max(p.kv_peak_demand, counter(stats, "kv_peak_demand_tokens"));
        p.kv_left_in_flight += counter(stats, "kv_tokens_in_flight");
      } catch (const std::exception&) {
        p.mock_read = false;
      }
    }
  }

  json::object targets;
  for (const auto& p : phases) {
    const auto mock_requests = p.kv_admitted + p.kv_over_budget;
    const double per_s = p.seconds > 0 ? 1 / p.seconds : 0;
    const double share = mock_requests > 0 ? static_cast<double>(p.kv_over_budget) /
                                                 static_cast<double>(mock_requests)
                                           : 0.0;
    auto all = to_json(summarize(p.all_ms));
    json::object statuses;
    for (const auto& [status, n] : p.failed_by_status) statuses[std::to_string(status)] = n;
    json::object t{{"requests", p.requests},
                   {"ok_2xx", p.ok},
                   {"failed", p.failed},
                   {"failed_by_status", std::move(statuses)},
                   {"long_requests", p.long_requests},
                   {"long_ok", p.long_ok},
                   {"mock_requests", mock_requests},
                   {"kv_admitted", p.kv_admitted},
                   {"kv_over_budget", p.kv_over_budget},
                   {"kv_over_budget_share", rounded(share, 10000)},
                   {"kv_peak_tokens", p.kv_peak},
                   {"kv_peak_demand_tokens", p.kv_peak_demand},
                   {"throughput_rps", rounded(static_cast<double>(p.ok) * per_s, 10)},
                   {"tokens_served_per_s", std::round(p.tokens_served * per_s)},
                   {"p50", all.at("p50")},
                   {"p99", all.at("p99")},
                   {"latency_ms", std::move(all)},
                   {"short_latency_ms", to_json(summarize(p.short_ms))},
                   {"long_latency_ms", to_json(summarize(p.long_ms))}};
    targets[p.name] = std::move(t);
  }

  const auto& tokens = phases[0];
  const auto& slots = phases[1];
  json::array checks;
  // The mock's counts decide; a slice it could not be read for, or whose tokens were still held
  // after its last answer, leaves them unknown.
  const bool tokens_read = tokens.mock_read && tokens.kv_left_in_flight == 0 &&
                           tokens.kv_admitted + tokens.kv_over_budget > 0;
  checks.push_back(check(tokens.node->name, "token budget: requests over the mock's KV budget",
                         static_cast<double>(tokens.kv_over_budget), "== 0",
                         tokens_read && tokens.kv_over_budget == 0));
  checks.push_back(check(tokens.node->name,
                         "token budget: 2xx of " + std::to_string(tokens.requests) + " requests",
                         static_cast<double>(tokens.ok), "== requests",
                         tokens.requests > 0 && tokens.ok == tokens.requests));
  // The figure without token weighting; a count of 0 would mean the mix never overflows a count
  // cap, and the comparison shows nothing.
  checks.push_back(check(slots.node->name,
                         "token budget, request cap " + std::to_string(token_mix_slot_cap()) +
                             ": requests over the mock's KV budget",
                         static_cast<double>(slots.kv_over_budget), "> 0 (the mix overflows)",
                         slots.mock_read && slots.kv_over_budget > 0));

  json::array shorts;
  for (auto t : token_mix::short_max_tokens) shorts.push_back(t);
  return {{"name", "token_budget"},
          {"config",
           {{"model", token_mix::model},
            {"budget_tokens", token_mix::budget_tokens},
            {"hold_ms", token_mix::hold_ms},
            {"short_max_tokens", std::move(shorts)},
            {"long_max_tokens", token_mix::long_max_tokens},
            {"long_one_in", token_mix::long_one_in},
            {"long_weight", token_mix_weight(token_mix::long_max_tokens)},
            {"mean_weight", rounded(token_mix_mean_weight(), 10)},
            {"slots_max_in_flight", token_mix_slot_cap()},
            {"callers", callers},
            {"rounds", rounds},
            {"slice_ms", slice.count()}}},
          {"targets", std::move(targets)},
          {"checks", std::move(checks)}};
}

}  // namespace tether::bench
