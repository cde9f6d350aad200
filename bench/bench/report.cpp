#include "bench/bench/report.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include <fmt/format.h>
#include <boost/json.hpp>

namespace tether::bench {
namespace {

namespace json = boost::json;

const json::value* at_path(const json::value& root, std::initializer_list<std::string_view> path) {
  const json::value* v = &root;
  for (auto key : path) {
    const auto* o = v->if_object();
    if (o == nullptr) return nullptr;
    v = o->if_contains(key);
    if (v == nullptr) return nullptr;
  }
  return v;
}

std::string num(const json::value& root, std::initializer_list<std::string_view> path,
                int decimals = 2) {
  const auto* v = at_path(root, path);
  if (v == nullptr || !(v->is_number())) return "–";
  return fmt::format("{:.{}f}", v->to_number<double>(), decimals);
}

const char* target_names[] = {"direct", "nginx", "tether"};

void checks_table(std::ostringstream& md, const json::object& scenarios) {
  md << "| scenario | target | what | value | limit | met |\n|---|---|---|---|---|---|\n";
  for (const auto& [name, s] : scenarios) {
    const auto* checks = at_path(s, {"checks"});
    if (checks == nullptr) continue;
    for (const auto& c : checks->as_array()) {
      const auto& o = c.as_object();
      md << "| " << name << " | " << json::value_to<std::string>(o.at("target")) << " | "
         << json::value_to<std::string>(o.at("what")) << " | "
         << fmt::format("{:.3f}", o.at("value").to_number<double>()) << " | "
         << json::value_to<std::string>(o.at("limit")) << " | "
         << (o.at("met").as_bool() ? "**yes**" : "**NO**") << " |\n";
    }
  }
}

}  // namespace

std::string markdown_report(const json::object& run, const std::string& svg_name) {
  const json::value root = run;
  std::ostringstream md;
  md << "# tether bench — " << json::value_to<std::string>(run.at("date")) << "\n\n";
  const auto& m = run.at("machine").as_object();
  md << "Machine: " << json::value_to<std::string>(m.at("cpu")) << ", "
     << m.at("cores").to_number<int>() << " cores, kernel "
     << json::value_to<std::string>(m.at("kernel")) << "; load average at start "
     << json::value_to<std::string>(m.at("loadavg_start")) << ", at end "
     << json::value_to<std::string>(m.at("loadavg_end")) << ".  \n"
     << json::value_to<std::string>(m.at("placement")) << "  \n"
     << "Mode: " << json::value_to<std::string>(run.at("mode")) << ", "
     << fmt::format("{:.0f}", run.at("elapsed_s").to_number<double>()) << " s. Raw figures: the "
     << "`.json` next to this file. Latencies in ms.\n\n";
  const auto& scenarios = run.at("scenarios").as_object();

  md << "## Targets\n\n";
  checks_table(md, scenarios);

  if (scenarios.contains("overhead")) {
    md << "\n## 1. Overhead — non-streaming chat, mock answers at once, closed loop\n\n"
       << "![latency percentiles](" << svg_name << ")\n\n"
       << "| concurrency | target | p50 | p99 | p99.9 | req/s | added p50 | added p99 | CPU µs/req "
          "| of it system |\n"
       << "|---|---|---|---|---|---|---|---|---|---|\n";
    for (const char* c : {"c1", "c16", "c64", "c256"}) {
      for (const char* t : target_names) {
        bool proxy = std::string_view(t) != "direct";
        md << "| " << (c + 1) << " | " << t << " | "
           << num(root, {"scenarios", "overhead", "targets", c, t, "p50"}, 3) << " | "
           << num(root, {"scenarios", "overhead", "targets", c, t, "p99"}, 3) << " | "
           << num(root, {"scenarios", "overhead", "targets", c, t, "p999"}, 3) << " | "
           << num(root, {"scenarios", "overhead", "targets", c, t, "throughput_rps"}, 0) << " | "
           << (proxy
                   ? num(root,
                         {"scenarios", "overhead", "derived", c, std::string(t) + "_added_p50_ms"},
                         3)
                   : "")
           << " | "
           << (proxy
                   ? num(root,
                         {"scenarios", "overhead", "derived", c, std::string(t) + "_added_p99_ms"},
                         3)
                   : "")
           << " | "
           << (proxy
                   ? num(root, {"scenarios", "overhead", "targets", c, t, "cpu_us_per_request"}, 1)
                   : "")
           << " | "
           << (proxy
                   ? num(root,
                         {"scenarios", "overhead", "targets", c, t, "system_cpu_us_per_request"}, 1)
                   : "")
           << " |\n";
      }
    }
    // "c=1 a, c=16 b, c=64 c, c=256 d" for one derived figure of the concurrency levels.
    auto per_level = [&](std::string_view key) {
      std::string out;
      for (const char* c : {"c1", "c16", "c64", "c256"}) {
        if (!out.empty()) out += ", ";
        out += "c=" + std::string(c + 1) + " " +
               num(root, {"scenarios", "overhead", "derived", c, key});
      }
      return out;
    };
    md << "\ntether's added p50 / nginx's added p50: "
       << per_level("added_p50_ratio_tether_over_nginx")
       << ". Throughput tether / nginx: " << per_level("throughput_ratio_tether_over_nginx")
       << ". CPU per request tether / nginx (each process's user + system time over its loops, "
          "its children included): "
       << per_level("cpu_per_request_ratio_tether_over_nginx")
       << "; its user part alone (each proxy's own code, the system part being the kernel's work "
          "on its sockets): "
       << per_level("user_cpu_per_request_ratio_tether_over_nginx") << ".\n";
    if (at_path(root, {"scenarios", "overhead", "open_loop", "targets"}) != nullptr) {
      md << "\nOpen loop at " << num(root, {"scenarios", "overhead", "open_loop", "rate_per_s"}, 0)
         << " req/s (half the slower proxy's c=16 throughput above, the same schedule for every "
            "target; latency from each request's scheduled moment, so a backlog counts):\n\n"
         << "| target | p50 | p99 | p99.9 | added p50 | added p99 | failed | sent > 1 ms late | "
            "peak in flight |\n|---|---|---|---|---|---|---|---|---|\n";
      for (const char* t : target_names) {
        const bool proxy = std::string_view(t) != "direct";
        auto open = [&](std::string_view key, int decimals) {
          return num(root, {"scenarios", "overhead", "open_loop", "targets", t, key}, decimals);
        };
        auto added = [&](const std::string& key) {
          return proxy ? num(root, {"scenarios", "overhead", "open_loop", "derived", key}, 3)
                       : std::string();
        };
        md << "| " << t << " | " << open("p50", 3) << " | " << open("p99", 3) << " | "
           << open("p999", 3) << " | " << added(std::string(t) + "_added_p50_ms") << " | "
           << added(std::string(t) + "_added_p99_ms") << " | " << open("failed", 0) << " | "
           << open("late_sends", 0) << " | " << open("peak_in_flight", 0) << " |\n";
      }
      md << "\ntether's added latency / nginx's at this rate: p50 "
         << num(root, {"scenarios", "overhead", "open_loop", "derived",
                       "added_p50_ratio_tether_over_nginx"})
         << ", p99 "
         << num(root, {"scenarios", "overhead", "open_loop", "derived",
                       "added_p99_ratio_tether_over_nginx"})
         << " (– where nginx added nothing measurable). An open loop charges every stall to "
            "the requests behind it, the load generator's and the VM's included: the direct "
            "path's own tail (and its late sends) shows how much of a tail is theirs.\n";
    }
    if (const auto* stall = at_path(root, {"scenarios", "overhead", "open_loop", "stall"});
        stall != nullptr && at_path(*stall, {"targets"}) != nullptr) {
      md << "\nThe same schedule with the proxy stopped (SIGSTOP) for "
         << num(*stall, {"stall_ms"}, 0) << " ms, " << num(*stall, {"stall_at_ms"}, 0)
         << " ms into a " << num(*stall, {"run_ms"}, 0)
         << " ms run: the time from the resume until its backlog has drained (the first request "
            "due after the resume from which 50 in a row answer within twice the run's p99 "
            "before the stall, at least 5 ms; – if that never came), per run:\n\n"
         << "| target | drained after (ms) | peak in flight | p99 of the second after the resume "
            "|\n|---|---|---|---|\n";
      for (const char* t : target_names) {
        const auto* o = at_path(*stall, {"targets", t});
        if (o == nullptr) continue;
        std::string runs;
        for (const auto& v : o->at("recovery_ms").as_array()) {
          if (!runs.empty()) runs += ", ";
          runs += v.is_null() ? "–" : fmt::format("{:.0f}", v.to_number<double>());
        }
        md << "| " << t << " | " << runs << " | " << num(*o, {"peak_in_flight"}, 0) << " | "
           << num(*o, {"p99_in_the_second_after_ms"}, 2) << " |\n";
      }
    }
  }
  if (scenarios.contains("streaming")) {
    md << "\n## 2. Streaming — 20 events, one every 10 ms, 16 streams at a time\n\n"
       << "| target | streams | head p50 | TTFB p50 | TTFB p99 | added TTFB p50 | gap p50 | gap "
          "p99 "
          "| gap max | |gap−10| p99 |\n|---|---|---|---|---|---|---|---|---|---|\n";
    for (const char* t : target_names) {
      auto base = [&](std::string_view a, std::string_view b) {
        return num(root, {"scenarios", "streaming", "targets", t, a, b}, 3);
      };
      bool proxy = std::string_view(t) != "direct";
      md << "| " << t << " | " << num(root, {"scenarios", "streaming", "targets", t, "streams"}, 0)
         << " | " << base("head_ms", "p50") << " | " << base("ttfb_ms", "p50") << " | "
         << base("ttfb_ms", "p99") << " | "
         << (proxy
                 ? num(root,
                       {"scenarios", "streaming", "derived", std::string(t) + "_added_ttfb_p50_ms"},
                       3)
                 : "")
         << " | " << base("gap_ms", "p50") << " | " << base("gap_ms", "p99") << " | "
         << base("gap_ms", "max") << " | " << base("gap_jitter_ms", "p99") << " |\n";
    }
  }
  if (scenarios.contains("cancellation")) {
    md << "\n## 3. Cancellation — callers leave while waiting, mid-stream, queued\n\n"
       << "Client close → the mock sees its upstream connection close (both clocks are this "
          "machine's wall clock).\n\n"
       << "| target | cancelled | p50 | p99 | max | orphaned requests | orphaned events | "
          "queued cancels reaching upstream | never reached upstream |\n"
       << "|---|---|---|---|---|---|---|---|---|\n";
    for (const char* t : target_names) {
      auto v = [&](std::string_view a, std::string_view b = {}, int d = 3) {
        return b.empty() ? num(root, {"scenarios", "cancellation", "targets", t, a}, d)
                         : num(root, {"scenarios", "cancellation", "targets", t, a, b}, d);
      };
      md << "| " << t << " | " << v("cancelled", {}, 0) << " | "
         << v("close_to_upstream_close_ms", "p50") << " | "
         << v("close_to_upstream_close_ms", "p99") << " | "
         << v("close_to_upstream_close_ms", "max") << " | " << v("orphaned_requests", {}, 0)
         << " | " << v("orphaned_events", {}, 0) << " | "
         << (std::string_view(t) == "tether"
                 ? v("queued_reached_upstream", {}, 0) + " of " + v("queued_cancelled", {}, 0)
                 : "n/a (no queue)")
         << " | " << v("never_reached_upstream", {}, 0) << " |\n";
    }
    md << "\nAn orphaned event is one the mock sent for nobody, due more than the close target "
          "(1 ms) after the caller's close. Events sent after the close but due within it (the "
          "price of a close that takes any time at all) —";
    for (const char* t : target_names)
      md << " " << t << ": "
         << num(root, {"scenarios", "cancellation", "targets", t, "events_in_close_window"}, 0)
         << ";";
    md << " the latest event after the close went out this long after it (ms) —";
    for (const char* t : target_names)
      md << " " << t << ": "
         << num(root, {"scenarios", "cancellation", "targets", t, "event_latest_after_close_ms"}, 3)
         << ";";
    md << "\n";
    md << "\ntether's own `tether_cancel_latency_seconds` over the same requests: mean "
       << num(root,
              {"scenarios", "cancellation", "targets", "tether",
               "tether_cancel_latency_metric_mean_ms"},
              3)
       << " ms (from its cancel decision to its socket closed).\n";
  }
  if (scenarios.contains("deadline_storm")) {
    auto v = [&](std::string_view a, std::string_view b = {}, int d = 3) {
      return b.empty() ? num(root, {"scenarios", "deadline_storm", "targets", "tether", a}, d)
                       : num(root, {"scenarios", "deadline_storm", "targets", "tether", a, b}, d);
    };
    md << "\n## 4. Deadline storm — upstream hangs, `X-Request-Deadline-Ms: 200`, bursts of "
       << num(root, {"scenarios", "deadline_storm", "config", "burst_size"}, 0)
       << " (tether only)\n\n"
       << "| requests | answer overshoot p50 | p99 | max | upstream close overshoot p50 | p99 | "
          "max | upstream connections outliving the deadline (> 5 ms) |\n"
       << "|---|---|---|---|---|---|---|---|\n"
       << "| " << v("requests", {}, 0) << " | " << v("answer_overshoot_ms", "p50") << " | "
       << v("answer_overshoot_ms", "p99") << " | " << v("answer_overshoot_ms", "max") << " | "
       << v("upstream_close_overshoot_ms", "p50") << " | "
       << v("upstream_close_overshoot_ms", "p99") << " | "
       << v("upstream_close_overshoot_ms", "max") << " | " << v("upstream_outlived_deadline", {}, 0)
       << " |\n"
       << "\nOvershoot runs from the bench's write of the request to the moment the answer's last "
          "bytes reached this host (the kernel's receive timestamp; "
       << v("answers_without_kernel_stamp", {}, 0)
       << " answers had none and count when parsed). Counted when this one-threaded bench parsed "
          "them instead: p50 "
       << v("answer_processed_overshoot_ms", "p50") << ", p99 "
       << v("answer_processed_overshoot_ms", "p99") << ", max "
       << v("answer_processed_overshoot_ms", "max")
       << ". The upstream close is the mock's record of it (its own clock, when it handled the "
          "close). Worst answer of each burst (ms):";
    if (const auto* bursts = at_path(root, {"scenarios", "deadline_storm", "targets", "tether",
                                            "answer_overshoot_max_per_burst_ms"});
        bursts != nullptr && bursts->is_array()) {
      for (const auto& b : bursts->get_array())
        md << ' ' << (b.is_number() ? fmt::format("{:.3f}", b.to_number<double>()) : "–");
    }
    md << ".\n";
  }
  if (scenarios.contains("budget")) {
    auto v = [&](std::string_view a, std::string_view b = {}, int d = 3) {
      return b.empty() ? num(root, {"scenarios", "budget", "targets", "tether", a}, d)
                       : num(root, {"scenarios", "budget", "targets", "tether", a, b}, d);
    };
    md << "\n## 5. Budget accuracy — cap " << num(root, {"scenarios", "budget", "config", "cap"}, 0)
       << ", " << num(root, {"scenarios", "budget", "config", "callers"}, 0)
       << " callers, 20 ms of upstream work each (tether only)\n\n"
       << "| requests | mock's peak concurrency | slot utilisation | queue wait p50 | p99 | "
          "latency p50 | p99 |\n|---|---|---|---|---|---|---|\n"
       << "| " << v("requests_ok", {}, 0) << " | " << v("observed_peak", {}, 0) << " | "
       << v("slot_utilisation") << " | " << v("queue_wait_ms", "p50") << " | "
       << v("queue_wait_ms", "p99") << " | " << v("latency_ms", "p50") << " | "
       << v("latency_ms", "p99") << " |\n";
  }
  if (scenarios.contains("shared_budget") &&
      at_path(root, {"scenarios", "shared_budget", "targets"}) != nullptr) {
    md << "\n## 7. Shared budget — member nodes drawing their slots from a budget host "
          "(CAF middleman, loopback)\n\n"
       << "Same load as scenario 1 through the standalone tether, through a member as "
          "configured by default (slots leased: a warm member acquires locally), and through a "
          "member that keeps no leases (`lease_idle_ms = 0`: every acquire is a round trip to "
          "the host). Added = the member's figure minus the standalone node's.\n\n"
       << "| concurrency | node | p50 | p99 | p99.9 | req/s | added p50 | added p99 |\n"
       << "|---|---|---|---|---|---|---|---|\n";
    for (const char* c : {"c1", "c16"}) {
      for (const char* t : {"tether", "tether-member", "tether-member-cold"}) {
        if (at_path(root, {"scenarios", "shared_budget", "targets", c, t}) == nullptr) continue;
        auto v = [&](std::string_view a, int d = 3) {
          return num(root, {"scenarios", "shared_budget", "targets", c, t, a}, d);
        };
        std::string_view name = t;
        std::string prefix = name == "tether-member"        ? "member_added_"
                             : name == "tether-member-cold" ? "remote_acquire_added_"
                                                            : "";
        auto added = [&](std::string_view a) {
          return prefix.empty()
                     ? std::string()
                     : num(root,
                           {"scenarios", "shared_budget", "derived", c, prefix + std::string(a)},
                           3);
        };
        md << "| " << std::string_view(c).substr(1) << " | " << t << " | " << v("p50") << " | "
           << v("p99") << " | " << v("p999") << " | " << v("throughput_rps", 0) << " | "
           << added("p50_ms") << " | " << added("p99_ms") << " |\n";
      }
    }
  }
  if (scenarios.contains("dead_replica") &&
      at_path(root, {"scenarios", "dead_replica", "targets"}) != nullptr) {
    auto cfg = [&](std::string_view k) {
      return num(root, {"scenarios", "dead_replica", "config", k}, 0);
    };
    md << "\n## 8. A dead replica — one model on three deployments, one refusing connections "
          "(tether only)\n\n"
       << "Closed loop at concurrency " << cfg("concurrency") << ", " << cfg("requests_per_slice")
       << " requests a slice, " << cfg("rounds")
       << " rounds, three tether nodes taking turns: all three deployments live; the third "
          "refusing connections with ejection off; the same with ejection on (after "
       << cfg("eject_after_failures") << " failures, for " << cfg("eject_base_ms")
       << " ms). `max_retries = " << cfg("max_retries")
       << "`, `retry_backoff_ms = " << cfg("retry_backoff_ms")
       << "`. Wasted attempts: tether's `tether_upstream_attempts_total{upstream=\"dead\","
          "outcome=\"upstream_failed\"}` over the run.\n\n"
       << "| node | requests | successes | p50 | p99 | p99.9 | max | req/s | wasted attempts | "
          "per request | ejections | retries refused by the budget |\n"
       << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const char* t : {"healthy", "dead_no_ejection", "dead_ejecting"}) {
      if (at_path(root, {"scenarios", "dead_replica", "targets", t}) == nullptr) continue;
      auto v = [&](std::string_view a, int d = 3) {
        return num(root, {"scenarios", "dead_replica", "targets", t, a}, d);
      };
      const bool dead = std::string_view(t) != "healthy";
      md << "| " << t << " | " << v("requests", 0) << " | " << v("successes", 0) << " | "
         << v("p50") << " | " << v("p99") << " | " << v("p999") << " | " << v("max") << " | "
         << v("throughput_rps", 0) << " | " << (dead ? v("wasted_attempts", 0) : "–") << " | "
         << (dead ? v("wasted_per_request", 4) : "–") << " | " << (dead ? v("ejections", 0) : "–")
         << " | " << v("retries_refused_by_budget", 0) << " |\n";
    }
    auto first = [&](std::string_view t, std::string_view part, std::string_view k) {
      return num(root, {"scenarios", "dead_replica", "targets", t, part, k}, 3);
    };
    md << "\np99 / the healthy node's p99: ejection off "
       << num(root, {"scenarios", "dead_replica", "derived", "dead_no_ejection_p99_over_healthy"})
       << ", ejection on "
       << num(root, {"scenarios", "dead_replica", "derived", "dead_ejecting_p99_over_healthy"})
       << ". With ejection on, the first " << cfg("first_requests")
       << " requests (the ejection among them: "
       << num(root,
              {"scenarios", "dead_replica", "targets", "dead_ejecting",
               "ejections_in_first_requests"},
              0)
       << " ejection, "
       << num(root,
              {"scenarios", "dead_replica", "targets", "dead_ejecting",
               "wasted_attempts_first_requests"},
              0)
       << " wasted attempts) p50 / p99 / max " << first("dead_ejecting", "first_requests", "p50")
       << " / " << first("dead_ejecting", "first_requests", "p99") << " / "
       << first("dead_ejecting", "first_requests", "max") << "; the rest ("
       << num(root,
              {"scenarios", "dead_replica", "targets", "dead_ejecting",
               "wasted_attempts_later_requests"},
              0)
       << " wasted attempts) " << first("dead_ejecting", "later_requests", "p50") << " / "
       << first("dead_ejecting", "later_requests", "p99") << " / "
       << first("dead_ejecting", "later_requests", "max") << ". The healthy node's first "
       << cfg("first_requests") << ": " << first("healthy", "first_requests", "p50") << " / "
       << first("healthy", "first_requests", "p99") << " / "
       << first("healthy", "first_requests", "max")
       << ". Wasted attempts with ejection on beyond `eject_after_failures` × ejection periods ("
       << num(root, {"scenarios", "dead_replica", "derived", "dead_ejecting_ejection_periods"}, 0)
       << "): "
       << num(root, {"scenarios", "dead_replica", "derived", "dead_ejecting_wasted_over_threshold"},
              0)
       << " (attempts already on their way to the dead upstream when it was ejected).\n";
  }
  if (scenarios.contains("token_budget") &&
      at_path(root, {"scenarios", "token_budget", "targets"}) != nullptr) {
    auto cfg = [&](std::string_view k, int d = 0) {
      return num(root, {"scenarios", "token_budget", "config", k}, d);
    };
    const auto* model = at_path(root, {"scenarios", "token_budget", "config", "model"});
    const std::string model_name =
        model != nullptr && model->is_string() ? std::string(model->as_string()) : "–";
    md << "\n## 9. Token budget — short and very long `max_tokens` against a KV budget (tether "
          "only)\n\n"
       << "The mock (`" << model_name << "`) holds at most " << cfg("budget_tokens")
       << " tokens (a request needs its body bytes / 4 plus its "
       << "`max_tokens`, the weight tether computes) for " << cfg("hold_ms")
       << " ms each, and answers 503 at once to a request that does not fit: it is over budget. "
       << "Closed loop of " << cfg("callers") << " callers; one request in " << cfg("long_one_in")
       << " asks for " << cfg("long_max_tokens") << " tokens (weight " << cfg("long_weight")
       << "), the others for 64, 128 or 256; mean weight " << cfg("mean_weight", 1) << ". Node "
       << "`tokens`: `max_tokens_in_flight = " << cfg("budget_tokens")
       << "`; node `slots`: no token cap, `max_in_flight = " << cfg("slots_max_in_flight")
       << "` (the budget over the mean weight, rounded). No retries. " << cfg("rounds")
       << " round(s) of " << cfg("slice_ms") << " ms per node. Latencies of 2xx answers.\n\n"
       << "| node | requests | 2xx | failed | over budget at the mock | share | peak KV tokens "
          "held | "
          "peak asked | 2xx/s | tokens served/s | p50 | p99 | long p50 | long p99 |\n"
       << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const char* t : {"tokens", "slots"}) {
      if (at_path(root, {"scenarios", "token_budget", "targets", t}) == nullptr) continue;
      auto v = [&](std::string_view a, int d = 0) {
        return num(root, {"scenarios", "token_budget", "targets", t, a}, d);
      };
      auto lg = [&](std::string_view k) {
        return num(root, {"scenarios", "token_budget", "targets", t, "long_latency_ms", k}, 3);
      };
      md << "| " << t << " | " << v("requests") << " | " << v("ok_2xx") << " | " << v("failed")
         << " | " << v("kv_over_budget") << " | " << v("kv_over_budget_share", 4) << " | "
         << v("kv_peak_tokens") << " | " << v("kv_peak_demand_tokens") << " | "
         << v("throughput_rps", 1) << " | " << v("tokens_served_per_s") << " | " << v("p50", 3)
         << " | " << v("p99", 3) << " | " << lg("p50") << " | " << lg("p99") << " |\n";
    }
    md << "\nFailed: as the callers saw them (tether answers the server's 503 with 502 "
          "`upstream_failed`). Peak asked: the most tokens the mock was asked to hold at once "
          "(those held plus an arrival's); above the budget exactly when a request was over it.\n";
  }
  if (scenarios.contains("streaming_throughput") &&
      at_path(root, {"scenarios", "streaming_throughput", "targets"}) != nullptr) {
    auto cfg = [&](std::string_view k) {
      return num(root, {"scenarios", "streaming_throughput", "config", k}, 0);
    };
    md << "\n## 10. Streaming throughput — many concurrent streams of 50 events a second\n\n"
       << "Each stream on its own connection, " << cfg("events_per_stream") << " events one every "
       << cfg("interval_ms")
       << " ms, each stamped by the mock as it sends it. The streams start spread over "
       << cfg("ramp_ms") << " ms; after " << cfg("warmup_ms") << " ms more, a steady window of "
       << cfg("window_ms")
       << " ms with every stream open. Lag: the bench's read of an event − the mock's send "
          "(one host, one clock; direct's is what the load generator adds). CPU µs per event: "
          "the target process's user + system time over the window / events read in it. The "
          "bench and the mock share one CPU: their share of it (bench + mock) near 1 means the "
          "load generator, not the target, set the pace. A target kept up at a step when every "
          "stream was whole, lag p99 ≤ 50 ms and ≥ 95% of the offered events were read; it "
          "steps up only then, and one behind at the first step (full mode) is tried "
          "with 750, 500 and 250 streams, down to the first it keeps up with.\n\n"
       << "| target | streams | offered events/s | read events/s | whole streams | lag p50 | "
          "p99 | p99.9 | max | CPU µs/event | of it system | target CPU share | bench + mock "
          "CPU share | kept up |\n"
       << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    const auto* targets = at_path(root, {"scenarios", "streaming_throughput", "targets"});
    for (const char* t : target_names) {
      const auto* steps = at_path(*targets, {t, "steps"});
      if (steps == nullptr) continue;
      for (const auto& [n, st] : steps->as_object()) {
        const auto* mock = at_path(st, {"mock_cpu_share"});
        const auto* kept = at_path(st, {"kept_up"});
        md << "| " << t << " | " << num(st, {"streams"}, 0) << " | "
           << num(st, {"offered_events_per_s"}, 0) << " | " << num(st, {"read_events_per_s"}, 0)
           << " | " << num(st, {"complete"}, 0) << " | " << num(st, {"lag_ms", "p50"}, 3) << " | "
           << num(st, {"lag_ms", "p99"}, 3) << " | " << num(st, {"lag_ms", "p999"}, 3) << " | "
           << num(st, {"lag_ms", "max"}, 3) << " | " << num(st, {"cpu_us_per_event"}, 2) << " | "
           << num(st, {"system_cpu_us_per_event"}, 2) << " | " << num(st, {"cpu_share"}, 2) << " | "
           << num(st, {"bench_cpu_share"}, 2)
           << (mock ? " + " + num(st, {"mock_cpu_share"}, 2) : std::string()) << " | "
           << (kept != nullptr && kept->is_bool() && kept->as_bool() ? "yes" : "**no**") << " |\n";
      }
    }
    md << "\nHighest step kept up:";
    for (const char* t : target_names) {
      if (at_path(*targets, {t}) == nullptr) continue;
      md << " " << t << " " << num(*targets, {t, "highest_streams_kept_up"}, 0) << " streams;";
    }
    md << " CPU per event tether / nginx: "
       << num(root, {"scenarios", "streaming_throughput", "derived",
                     "cpu_per_event_ratio_tether_over_nginx"})
       << " at the first step";
    if (const auto* d = at_path(root, {"scenarios", "streaming_throughput", "derived"})) {
      static constexpr std::string_view per_step = "cpu_per_event_ratio_tether_over_nginx_n";
      for (const auto& [k, v] : d->as_object()) {
        if (!k.starts_with(per_step) || !v.is_number()) continue;
        md << ", " << k.substr(per_step.size()) << " streams "
           << fmt::format("{:.2f}", v.to_number<double>());
      }
    }
    md << "; added lag p50 / p99 over direct's: nginx "
       << num(root, {"scenarios", "streaming_throughput", "derived", "nginx_added_lag_p50_ms"}, 3)
       << " / "
       << num(root, {"scenarios", "streaming_throughput", "derived", "nginx_added_lag_p99_ms"}, 3)
       << ", tether "
       << num(root, {"scenarios", "streaming_throughput", "derived", "tether_added_lag_p50_ms"}, 3)
       << " / "
       << num(root, {"scenarios", "streaming_throughput", "derived", "tether_added_lag_p99_ms"}, 3)
       << " ms (the first step).\n";
  }
  if (const auto* levels = at_path(root, {"scenarios", "every_cpu", "levels"})) {
    md << "\n## 11. Every CPU — nginx with a worker per CPU and tether unpinned, beside the pinned "
          "pair\n\n"
       << "Closed loops of the immediate answer, the four targets taking turns (the order rotates "
          "each round). CPU: every thread of the process and its children, over the loops. "
          "Busiest thread: the one thread (for nginx, the one worker process) that used the most "
          "CPU in a loop, as a share of the process's total. The bench and the mock stay on their "
          "one CPU, which the unpinned proxies share with them.\n\n"
       << "| concurrency | target | req/s | CPU µs/req | CPUs busy | busiest thread's share | "
          "p50 | p99 |\n"
       << "|---|---|---|---|---|---|---|---|\n";
    for (const auto& [c, level] : levels->as_object()) {
      for (const auto& [t, f] : level.as_object()) {
        if (t == "derived") continue;
        md << "| " << c.substr(1) << " | " << t << " | " << num(f, {"throughput_rps"}, 0) << " | "
           << num(f, {"cpu_us_per_request"}, 1) << " | " << num(f, {"cpu_share_of_one_cpu"}, 2)
           << " | " << num(f, {"busiest_thread_share"}, 3) << " | "
           << num(f, {"latency_ms", "p50"}, 3) << " | " << num(f, {"latency_ms", "p99"}, 3)
           << " |\n";
      }
    }
    for (const auto& [c, level] : levels->as_object()) {
      md << "\nc=" << c.substr(1) << ": tether's throughput on every CPU / on one "
         << num(level, {"derived", "tether_throughput_every_cpu_over_one_cpu"}, 3)
         << "; tether / nginx on one CPU "
         << num(level, {"derived", "tether_over_nginx_one_cpu"}, 3) << ", on every CPU "
         << num(level, {"derived", "tether_over_nginx_every_cpu"}, 3)
         << "; tether's CPU per request on every CPU / on one "
         << num(level, {"derived", "tether_cpu_per_request_every_cpu_over_one_cpu"}, 3) << ".\n";
    }
  }
  if (scenarios.contains("memory")) {
    md << "\n## 6. Memory — concurrent slow streams (an event a second)\n\n";
    const auto* ceiling = at_path(root, {"scenarios", "memory", "config", "descriptor_ceiling"});
    if (ceiling && ceiling->to_number<double>() < 10000) {
      md << "10,000 streams were asked for; the processes' descriptor limit (a hard limit this "
            "machine does not let the script raise) allows "
         << ceiling->to_number<std::int64_t>()
         << " through a proxy (two sockets each), so that is the largest size.\n\n";
    }
    md << "Bytes per stream = (RSS − idle RSS before the bench's first request) / streams: an "
          "upper bound, charging the growth left by the earlier scenarios to the streams.\n\n";
    md << "| target | streams | held | idle RSS (MiB) | RSS (MiB) | bytes per stream | ramp (s) | "
          "mock streams still open after the callers left |\n"
       << "|---|---|---|---|---|---|---|---|\n";
    const auto* targets = at_path(root, {"scenarios", "memory", "targets"});
    for (const char* t : target_names) {
      const auto* levels = targets ? at_path(*targets, {t}) : nullptr;
      if (levels == nullptr) continue;
      for (const auto& [n, lv] : levels->as_object()) {
        md << "| " << t << " | " << num(lv, {"streams"}, 0) << " | " << num(lv, {"held"}, 0)
           << " | " << fmt::format("{:.1f}", lv.at("idle_rss_kib").to_number<double>() / 1024)
           << " | " << fmt::format("{:.1f}", lv.at("rss_kib").to_number<double>() / 1024) << " | "
           << num(lv, {"bytes_per_stream"}, 0) << " | " << num(lv, {"ramp_s"}, 2) << " | "
           << num(lv, {"mock_active_after_close"}, 0) << " |\n";
      }
    }
  }
  if (scenarios.contains("abandon") &&
      at_path(root, {"scenarios", "abandon", "targets"}) != nullptr) {
    auto cfg = [&](std::string_view k, int d = 0) {
      return num(root, {"scenarios", "abandon", "config", k}, d);
    };
    auto share = [&](std::string_view k) {
      const auto* v = at_path(root, {"scenarios", "abandon", "config", k});
      return v != nullptr && v->is_number() ? fmt::format("{:.0f}%", v->to_number<double>() * 100)
                                            : std::string("–");
    };
    md << "\n## 12. Abandon — callers leaving a real engine (llama-server, 2 slots)\n\n"
       << "Closed loop of " << cfg("callers")
       << " callers per target, `max_tokens` "
          "24–55, "
       << cfg("rounds") << " round(s) of "
       << (cfg("requests_per_phase") != "–"
               ? cfg("requests_per_phase") + " requests (at most " + cfg("phase_ms") + " ms)"
               : cfg("phase_ms") + " ms")
       << " per target. Of the requests, " << share("share_stream_abort")
       << " leave a stream after 3–20 events, " << share("share_nonstream_abort")
       << " leave a non-stream request 150–500 ms after sending, " << share("share_deadline_stream")
       << " and " << share("share_deadline_nonstream")
       << " (streams, non-streams) have a deadline of 200–600 ms (through tether "
          "`x-request-deadline-ms`, elsewhere the caller's own timeout). Figures from the "
          "engine's own log (`-v --log-timestamps`); its clock is mapped to the bench's within ±"
       << num(root, {"scenarios", "abandon", "clock", "uncertainty_ms"}, 3)
       << " ms. Times in ms; steps: the engine's median decode step on that target. A caller "
          "who left before the engine ran the request (held in tether's queue, or deferred in "
          "the engine and cancelled there) has no time to idle; tokens for nobody count every "
          "request. Tokens after a leave: for each leave the engine was running (or launched "
          "later), its `n_decoded = k` lines stamped after the leave; max (leaves), streamed "
          "and not.\n\n"
       << "| target | requests | answered | failed | left (of them before the engine ran them) "
          "| tokens after a leave: streamed / non-streamed | left → engine idle p50 / p99 / max "
          "| p50 / p99 in steps | engine noticed the leave | tokens for nobody / 1,000 requests "
          "| queued inside the engine p50 / p99 / max (deferred) | decode step p50 | answered "
          "p50 / p99 |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const char* t : target_names) {
      if (at_path(root, {"scenarios", "abandon", "targets", t}) == nullptr) continue;
      auto v = [&](std::string_view a, std::string_view b = "", int d = 0) {
        return b.empty() ? num(root, {"scenarios", "abandon", "targets", t, a}, d)
                         : num(root, {"scenarios", "abandon", "targets", t, a, b}, d);
      };
      const auto* never =
          at_path(root, {"scenarios", "abandon", "targets", t, "never_reached_engine"});
      const auto* queued =
          at_path(root, {"scenarios", "abandon", "targets", t, "left_while_queued_in_engine"});
      const auto before = (never != nullptr ? never->to_number<double>() : 0) +
                          (queued != nullptr ? queued->to_number<double>() : 0);
      md << "| " << t << " | " << v("requests") << " | " << v("answered") << " | " << v("failed")
         << " | " << v("left") << " (" << fmt::format("{:.0f}", before) << ") | "
         << v("tokens_after_streamed_leave", "max") << " (" << v("tokens_after_streamed_leave", "n")
         << ") / " << v("tokens_after_nonstreamed_leave", "max") << " ("
         << v("tokens_after_nonstreamed_leave", "n") << ") | "
         << v("leave_to_engine_idle_ms", "p50") << " / " << v("leave_to_engine_idle_ms", "p99")
         << " / " << v("leave_to_engine_idle_ms", "max") << " | "
         << v("leave_to_engine_idle_p50_steps", "", 1) << " / "
         << v("leave_to_engine_idle_p99_steps", "", 1) << " | " << v("engine_noticed_cancel")
         << " | " << v("tokens_for_nobody_per_1000_requests", "", 0) << " | "
         << v("queued_in_engine_ms", "p50") << " / " << v("queued_in_engine_ms", "p99") << " / "
         << v("queued_in_engine_ms", "max") << " (" << v("deferred_in_engine") << ") | "
         << v("decode_step_ms", "p50", 1) << " | " << v("answered_latency_ms", "p50") << " / "
         << v("answered_latency_ms", "p99") << " |\n";
    }
  }
  if (const auto* prefix = at_path(root, {"scenarios", "prefix", "targets"});
      prefix != nullptr && prefix->is_object()) {
    auto cfg = [&](std::string_view k) {
      return num(root, {"scenarios", "prefix", "config", k}, 0);
    };
    md << "\n## 13. Prefix — the fleet's cache (llama-server replicas, 2 slots each)\n\n"
       << "Closed loop of " << cfg("callers") << " callers per target streaming `max_tokens` "
       << cfg("max_tokens") << ", " << cfg("rounds") << " round(s) of " << cfg("phase_ms")
       << " ms counted per target and workload (shared_prefix after a warm-up of "
       << cfg("shared_prefix_warmup_ms")
       << " ms: the agents' first turns). shared_prefix: each caller an agent with a system "
          "prompt of "
       << cfg("system_prompt_words") << " words (≈ 1,300 tokens) in conversations of "
       << cfg("turns_per_conversation")
       << " turns; unique: a fresh prompt of the same length every time. TTFT in ms. Cached "
          "share: prompt tokens the engines reused (`timings.cache_n`) of all prompt tokens; "
          "replica shares: of the counted answers, those each replica computed (each names it: "
          "`--alias replica-<k>`), and of their time in flight (the live work the bound of "
          "`prefix_load_factor` is on); the replicas' counters: `tokens_predicted_total` / "
          "`max_tokens`) over whole phases.\n\n"
       << "| workload | target | answered (warm-up) | TTFT p50 / p99 | requests / min | "
          "cached share (by replica) | replica shares: answers; live work | the replicas' "
          "counters: requests; "
          "prompt tokens evaluated | tether's decisions: home / spill / least_work |\n"
          "|---|---|---|---|---|---|---|---|---|\n";
    auto list = [&](std::initializer_list<std::string_view> path, int decimals) {
      std::string out;
      if (const auto* a = at_path(root, path); a != nullptr && a->is_array()) {
        for (const auto& x : a->as_array()) {
          if (!out.empty()) out += " / ";
          out += fmt::format("{:.{}f}", x.to_number<double>(), decimals);
        }
      }
      return out;
    };
    for (const char* w : {"shared_prefix", "unique"}) {
      for (const char* t : {"least_work", "prefix", "nginx"}) {
        if (at_path(root, {"scenarios", "prefix", "targets", t, w}) == nullptr) continue;
        auto v = [&](std::string_view a, std::string_view b = "", int d = 0) {
          return b.empty() ? num(root, {"scenarios", "prefix", "targets", t, w, a}, d)
                           : num(root, {"scenarios", "prefix", "targets", t, w, a, b}, d);
        };
        md << "| " << w << " | " << t << " | " << v("answered") << " ("
           << v("warmup_answers_not_counted") << ") | " << v("ttft_ms", "p50") << " / "
           << v("ttft_ms", "p99") << " | " << v("requests_per_minute", "", 1) << " | "
           << v("cached_share", "", 3) << " ("
           << list({"scenarios", "prefix", "targets", t, w, "replica_cached_share"}, 2) << ") | "
           << list({"scenarios", "prefix", "targets", t, w, "replica_share"}, 2) << "; "
           << list({"scenarios", "prefix", "targets", t, w, "replica_live_work_share"}, 2) << " | "
           << list({"scenarios", "prefix", "targets", t, w, "engine_requests_by_replica"}, 0)
           << "; "
           << list({"scenarios", "prefix", "targets", t, w,
                    "engine_prompt_tokens_evaluated_by_replica"},
                   0)
           << " | "
           << (at_path(root, {"scenarios", "prefix", "targets", t, w, "route_decisions",
                              "prefix_home"}) != nullptr
                   ? v("route_decisions", "prefix_home") + " / " +
                         v("route_decisions", "prefix_spill") + " / " +
                         v("route_decisions", "least_work")
                   : std::string("–"))
           << " |\n";
      }
    }
  }
  return md.str();
}

std::string latency_svg(const json::object& run) {
  const json::value root = run;
  const char* colors[] = {"#4c78a8", "#f58518", "#54a24b"};
  const char* pcts[] = {"p50", "p90", "p99", "p999"};
  const char* pct_labels[] = {"p50", "p90", "p99", "p99.9"};
  struct panel {
    std::string title;
    std::vector<std::string> path;  // to the per-target summaries
  };
  std::vector<panel> panels = {
      {"overhead, concurrency 1", {"scenarios", "overhead", "targets", "c1"}},
      {"overhead, concurrency 16", {"scenarios", "overhead", "targets", "c16"}},
      {"overhead, concurrency 64", {"scenarios", "overhead", "targets", "c64"}},
      {"overhead, concurrency 256", {"scenarios", "overhead", "targets", "c256"}},
      {"streaming: time to first event", {"scenarios", "streaming", "targets"}}};
  const int pw = 300, ph = 260, ml = 56, mt = 50, gap = 30;
  const int width = ml + static_cast<int>(panels.size()) * (pw + gap) + 20;
  const int height = mt + ph + 90;
  std::ostringstream svg;
  svg << fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n<text x=\"{}\" y=\"22\" font-size=\"15\" font-weight=\"bold\">tether "
      "bench {}: latency percentiles (ms) by target</text>\n",
      width, height, ml, json::value_to<std::string>(run.at("date")));
  for (std::size_t p = 0; p < panels.size(); ++p) {
    const int x0 = ml + static_cast<int>(p) * (pw + gap), y0 = mt;
    const json::value* base = &root;
    for (const auto& k : panels[p].path) {
      base = base && base->is_object() ? base->as_object().if_contains(k) : nullptr;
    }
    auto value = [&](const char* t, const char* pct) -> std::optional<double> {
      if (base == nullptr) return std::nullopt;
      const auto* v = at_path(*base, {t});
      if (v && p == 3) v = at_path(*v, {"ttfb_ms"});
      if (v) v = at_path(*v, {pct});
      if (v == nullptr || !v->is_number()) return std::nullopt;
      return v->to_number<double>();
    };
    double ymax = 0;
    for (const char* t : target_names) {
      for (const char* pct : pcts) ymax = std::max(ymax, value(t, pct).value_or(0));
    }
    if (ymax <= 0) ymax = 1;
    // A round upper bound: 1, 2 or 5 times a power of ten.
    double mag = std::pow(10, std::floor(std::log10(ymax)));
    double top = mag;
    for (double f : {1.0, 2.0, 5.0, 10.0}) {
      top = f * mag;
      if (top >= ymax) break;
    }
    svg << fmt::format(
        "<g><text x=\"{}\" y=\"{}\" font-weight=\"bold\">{}</text>\n<rect x=\"{}\" y=\"{}\" "
        "width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n",
        x0, y0 - 8, panels[p].title, x0, y0, pw, ph);
    for (int i = 0; i <= 5; ++i) {
      double v = top * i / 5;
      int y = y0 + ph - static_cast<int>(ph * i / 5.0);
      svg << fmt::format(
          "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{}\" "
          "text-anchor=\"end\" font-size=\"10\">{:.3g}</text>\n",
          x0, y, x0 + pw, y, x0 - 4, y + 3, v);
    }
    auto px = [&](std::size_t i) { return x0 + 30 + static_cast<int>(i) * (pw - 60) / 3; };
    for (std::size_t i = 0; i < 4; ++i) {
      svg << fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px(i),
                         y0 + ph + 16, pct_labels[i]);
    }
    for (std::size_t ti = 0; ti < 3; ++ti) {
      std::string points;
      for (std::size_t i = 0; i < 4; ++i) {
        auto v = value(target_names[ti], pcts[i]);
        if (!v) continue;
        int y = y0 + ph - static_cast<int>(ph * (*v / top));
        points += fmt::format("{},{} ", px(i), y);
        svg << fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"3\" fill=\"{}\"/>\n", px(i), y,
                           colors[ti]);
      }
      svg << fmt::format(
          "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", points,
          colors[ti]);
    }
    svg << "</g>\n";
  }
  for (std::size_t ti = 0; ti < 3; ++ti) {
    int x = ml + static_cast<int>(ti) * 110, y = mt + ph + 50;
    svg << fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"4\" fill=\"{}\"/><text x=\"{}\" "
        "y=\"{}\">{}</text>\n",
        x, y - 4, colors[ti], x + 20, y + 2, target_names[ti]);
  }
  svg << fmt::format(
      "<text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"#555\">y: ms (linear, per panel). "
      "Closed loop, keep-alive; streaming panel: 16 streams, events every 10 ms.</text>\n",
      ml, mt + ph + 75);
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace tether::bench
