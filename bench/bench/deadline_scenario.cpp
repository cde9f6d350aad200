// Scenario 4: bursts of requests to an upstream that never answers, each caller allowing
// 200 ms (X-Request-Deadline-Ms). How late the answer comes after the deadline, and whether any
// upstream connection outlives it (the mock's close time against the caller's send time).
// tether only: nginx and the direct path have no per-request deadline to honour.
#include <algorithm>
#include <cmath>
#include <map>

#include <boost/json.hpp>

#include "bench/bench/percentiles.hpp"
#include "bench/bench/scenarios.hpp"

namespace tether::bench {

boost::json::object run_deadline_storm(bench_context& ctx) {
  namespace json = boost::json;
  const bool quick = ctx.options().quick;
  const std::size_t bursts = quick ? 2 : 5;
  const std::size_t burst_size = quick ? 50 : 200;
  const double deadline_ms = 200;
  const double late_limit_ms = 5;
  const target* t = ctx.find("tether");
  if (t == nullptr) return {{"name", "deadline_storm"}, {"skipped", "no tether target"}};

  // The answer's overshoot is taken when its bytes reached this host (kernel timestamps): 200
  // answers come within a few ms, and this one-threaded bench (sharing its core with the mock,
  // which is handling 200 closes at that moment) parses them one after the other. What it
  // parsed when is kept too (processed_overshoot).
  std::vector<double> answer_overshoot, processed_overshoot, upstream_overshoot;
  json::array burst_max_overshoot;
  std::size_t unstamped = 0;
  std::map<unsigned, std::size_t> statuses;
  std::size_t failed = 0, outlived = 0, never_reached = 0, upstream_still_open = 0;
  for (std::size_t b = 0; b < bursts && !ctx.out_of_time(); ++b) {
    std::vector<std::shared_ptr<client_connection>> conns;
    std::vector<std::string> ids;
    std::vector<double> sent;
    // Connections are opened (and used once) first, so the burst measures the deadline, not a
    // burst of TCP handshakes queued in the listen backlog.
    std::size_t pending = burst_size;
    auto warm = ctx.request(*t, bench_models::immediate, false);
    for (std::size_t i = 0; i < burst_size; ++i) {
      conns.push_back(std::make_shared<client_connection>(ctx.ioc(), t->endpoint));
      conns.back()->stamp_arrivals();
      conns.back()->exchange(warm, [&](exchange_result&) { --pending; });
    }
    ctx.run_until([&] { return pending == 0; }, milliseconds(5000));
    ctx.mock().reset();
    pending = burst_size;
    const std::size_t burst_first = answer_overshoot.size();
    for (std::size_t i = 0; i < burst_size; ++i) {
      ids.push_back(ctx.next_request_id("deadline"));
      sent.push_back(0);
      auto req = ctx.request(*t, bench_models::hang, false,
                             {"x-request-id: " + ids.back(), "x-request-deadline-ms: 200"});
      conns[i]->exchange(req, [&, i](exchange_result& r) {
        --pending;
        sent[i] = r.sent_epoch_ms;
        if (!r.ok) {
          ++failed;
          return;
        }
        ++statuses[r.status];
        processed_overshoot.push_back(r.latency_ms - deadline_ms);
        if (!r.arrived_ms) ++unstamped;
        answer_overshoot.push_back(r.arrived_ms.value_or(r.latency_ms) - deadline_ms);
      });
    }
    ctx.run_until([&] { return pending == 0; }, milliseconds(5000));
    // The worst answer of each burst: a single slow burst (the VM's hiccup) reads differently
    // from every burst running late.
    if (answer_overshoot.size() > burst_first) {
      burst_max_overshoot.push_back(
          *std::max_element(answer_overshoot.begin() + static_cast<std::ptrdiff_t>(burst_first),
                            answer_overshoot.end()));
    } else {
      burst_max_overshoot.push_back(nullptr);
    }
    for (auto& c : conns) {
      if (c->busy()) {
        ++failed;
        c->abort();
      }
    }
    // The answers can arrive a moment before the upstream closes (tether answers and cancels at
    // once). Reading the mock's log only once the 5 ms allowance has passed for every request
    // keeps the count exact: a close within it has its own timestamp, and whatever the mock
    // still holds open then has outlived its deadline by more than 5 ms.
    ctx.pause(milliseconds(static_cast<long>(late_limit_ms) + 15));
    auto stats = ctx.mock().stats();
    auto log = mock_log_by_request_id(stats);
    for (std::size_t i = 0; i < burst_size; ++i) {
      auto it = log.find(ids[i]);
      if (it == log.end()) {
        ++never_reached;
        continue;
      }
      const auto& closed = it->second.at("closed_ms");
      if (closed.is_null()) {
        ++upstream_still_open;
        ++outlived;
        continue;
      }
      double over = closed.to_number<double>() - sent[i] - deadline_ms;
      upstream_overshoot.push_back(over);
      if (over > late_limit_ms) ++outlived;
    }
    ctx.pause(milliseconds(100));
  }
  auto answer = summarize(answer_overshoot);
  auto processed = summarize(processed_overshoot);
  auto upstream = summarize(upstream_overshoot);
  json::object status_counts;
  for (const auto& [code, n] : statuses) status_counts[std::to_string(code)] = n;
  json::array checks;
  checks.push_back(check("tether", "answer overshoot p99 (ms)", answer.p99, "<= 5",
                         answer.n > 0 && answer.p99 <= late_limit_ms));
  checks.push_back(check("tether", "upstream connections open > 5 ms past the deadline",
                         static_cast<double>(outlived), "== 0", outlived == 0));
  return {{"name", "deadline_storm"},
          {"config",
           {{"model", bench_models::hang},
            {"deadline_ms", deadline_ms},
            {"bursts", bursts},
            {"burst_size", burst_size}}},
          {"targets",
           {{"tether",
             {{"requests", bursts * burst_size},
              {"statuses", std::move(status_counts)},
              {"failed", failed},
              {"answer_overshoot_ms", to_json(answer)},
              {"answer_processed_overshoot_ms", to_json(processed)},
              {"answer_overshoot_max_per_burst_ms", std::move(burst_max_overshoot)},
              {"answers_without_kernel_stamp", unstamped},
              {"upstream_close_overshoot_ms", to_json(upstream)},
              {"upstream_outlived_deadline", outlived},
              {"upstream_still_open", upstream_still_open},
              {"never_reached_upstream", never_reached}}}}},
          {"checks", std::move(checks)}};
}

}  // namespace tether::bench
