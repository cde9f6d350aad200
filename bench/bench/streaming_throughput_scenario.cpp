// Scenario 10 (issue #27): streaming throughput. N concurrent streams, each on its own keep-alive
// connection, each sending 50 events a second (the mock's mock-stream-stamped-<n>x20: every event
// carries the moment the mock handed it to its socket). The streams start spread over a ramp, so
// their events are spread over each 20 ms; after a warm-up, over a steady window with every
// stream open:
//  * the events the bench read, against the events offered (N × 50 per second);
//  * relay lag: the bench's read of an event − the mock's send of it, both wall-clock epoch time
//    on one host (the clock of the mock's /_stats times). The direct target's lag is what the
//    load generator's own reading adds: the floor of every target's;
//  * the CPU (user + system) of the target's process and its children over the window, per event
//    read: CPU µs per relayed event (no figure for direct).
// Then, full mode only, more streams (1,000 → 2,000 → 4,000) for each target that kept up (every
// stream whole, lag p99 ≤ 50 ms, ≥ 95% of the offered events read in the window), and fewer
// (750, 500, 250) for one behind at 1,000, to find its ceiling. The bench and the mock share one
// CPU: their CPU share over the window says when a step measured the load generator rather than the
// proxy (direct falling behind too).
#include <sys/resource.h>

#include <charconv>
#include <cmath>
#include <iostream>
#include <map>

#include <boost/asio/steady_timer.hpp>
#include <boost/json.hpp>

#include "bench/bench/percentiles.hpp"
#include "bench/bench/scenarios.hpp"

namespace tether::bench {
namespace {

namespace json = boost::json;
namespace asio = boost::asio;

// A step keeps up when every event arrives, and in time.
constexpr double kept_up_lag_p99_ms = 50;
constexpr double kept_up_read_share = 0.95;

struct step_shape {
  std::size_t streams = 0;
  const char* model = nullptr;
  std::uint32_t events = 0;  // per stream
  milliseconds ramp{0};      // the streams start evenly spread over it
  milliseconds warmup{0};    // after the ramp, before the window
  milliseconds window{0};
};

struct step_result {
  std::size_t streams = 0;
  std::size_t complete = 0;  // 200, every event, ended cleanly
  std::size_t failed = 0;
  std::string first_error;
  double window_s = 0;
  std::size_t window_events = 0;
  std::size_t unstamped_events = 0;
  std::vector<double> lag_ms;  // events read in the window
  double lag_max_all_ms = 0;   // any event of the step
  std::optional<double> cpu_s, system_cpu_s, mock_cpu_s;
  double bench_cpu_s = 0;
};

double own_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return s(u.ru_utime) + s(u.ru_stime);
}

// The mock's `mock_sent_us`, at the end of each stamped chunk's JSON: found from the back.
std::optional<std::int64_t> sent_us_of(std::string_view event) {
  static constexpr std::string_view key = "\"mock_sent_us\":";
  const auto at = event.rfind(key);
  if (at == std::string_view::npos) return std::nullopt;
  const char* first = event.data() + at + key.size();
  std::int64_t us = 0;
  auto [ptr, ec] = std::from_chars(first, event.data() + event.size(), us);
  if (ec != std::errc{}) return std::nullopt;
  return us;
}

void settle(bench_context& ctx) {
  for (int i = 0; i < 50; ++i) {
    if (ctx.mock().stats().at("active").to_number<double>() == 0) return;
    ctx.pause(milliseconds(100));
  }
}

step_result run_step(bench_context& ctx, const target& t, const step_shape& shape) {
  step_result out;
  out.streams = shape.streams;
  ctx.mock().reset();
  const auto req = ctx.request(t, shape.model, true);
  std::vector<std::shared_ptr<client_connection>> conns;
  std::vector<std::unique_ptr<asio::steady_timer>> launches;
  conns.reserve(shape.streams);
  launches.reserve(shape.streams);
  bool in_window = false;
  std::size_t finished = 0;
  const auto begin = steady::now() + milliseconds(20);
  for (std::size_t i = 0; i < shape.streams; ++i) {
    auto c = std::make_shared<client_connection>(ctx.ioc(), t.endpoint);
    c->on_event([&](std::string_view event, double read_epoch_ms) {
      const auto sent = sent_us_of(event);
      if (!sent) {
        ++out.unstamped_events;
        return;
      }
      const double lag = read_epoch_ms - static_cast<double>(*sent) / 1000.0;
      out.lag_max_all_ms = std::max(out.lag_max_all_ms, lag);
      if (!in_window) return;
      ++out.window_events;
      out.lag_ms.push_back(lag);
    });
    conns.push_back(c);
    const auto offset =
        shape.ramp * static_cast<std::int64_t>(i) / static_cast<std::int64_t>(shape.streams);
    launches.push_back(std::make_unique<asio::steady_timer>(ctx.ioc(), begin + offset));
    launches.back()->async_wait([&, c](boost::system::error_code ec) {
      if (ec) return;
      c->exchange(req, [&](exchange_result& r) {
        ++finished;
        if (r.ok && r.status == 200 && r.event_ms.size() == shape.events) {
          ++out.complete;
          return;
        }
        if (out.first_error.empty()) {
          out.first_error = "status " + std::to_string(r.status) + ", " +
                            std::to_string(r.event_ms.size()) + " events" +
                            (r.error.empty() ? "" : ": " + r.error);
        }
      });
    });
  }
  // The window opens once every stream has started and warmed up.
  ctx.run_for(std::chrono::duration_cast<milliseconds>(begin - steady::now()) + shape.ramp +
              shape.warmup);
  const auto w0 = steady::now();
  const auto cpu0 = ctx.cpu_seconds(t);
  const auto sys0 = ctx.system_cpu_seconds(t);
  const target mock{"mock", {}, ctx.options().mock_pid};
  const auto mock0 = ctx.cpu_seconds(mock);
  const double bench0 = own_cpu_seconds();
  in_window = true;
  ctx.run_for(shape.window);
  in_window = false;
  const auto cpu1 = ctx.cpu_seconds(t);
  const auto sys1 = ctx.system_cpu_seconds(t);
  const auto mock1 = ctx.cpu_seconds(mock);
  out.bench_cpu_s = own_cpu_seconds() - bench0;
  out.window_s = std::chrono::duration<double>(steady::now() - w0).count();
  if (cpu0 && cpu1) out.cpu_s = *cpu1 - *cpu0;
  if (sys0 && sys1) out.system_cpu_s = *sys1 - *sys0;
  if (mock0 && mock1) out.mock_cpu_s = *mock1 - *mock0;

  // The rest of every stream: a late one would still end within a few seconds of its schedule.
  const auto stream_ms = static_cast<long>(bench_models::stamped_interval_ms * shape.events);
  ctx.run_until([&] { return finished == shape.streams; }, milliseconds(stream_ms + 10000));
  for (std::size_t i = 0; i < conns.size(); ++i) {
    if (conns[i]->busy()) {
      conns[i]->abort();
      if (out.first_error.empty()) out.first_error = "unfinished";
    }
    launches[i]->cancel();
  }
  out.failed = shape.streams - out.complete;
  conns.clear();
  settle(ctx);
  ctx.pause(milliseconds(300));
  return out;
}

double r3(double v) {
  return std::round(v * 1000) / 1000;
}

json::object step_json(const step_result& r, const step_shape& shape, const target& t,
                       bool kept_up) {
  const auto lag = summarize(r.lag_ms);
  const double offered =
      static_cast<double>(shape.streams) * 1000.0 / bench_models::stamped_interval_ms;
  const double read_per_s = r.window_s > 0 ? static_cast<double>(r.window_events) / r.window_s : 0;
  json::object o{{"streams", shape.streams},
                 {"complete", r.complete},
                 {"failed", r.failed},
                 {"offered_events_per_s", offered},
                 {"window_s", r3(r.window_s)},
                 {"window_events", r.window_events},
                 {"read_events_per_s", std::round(read_per_s)},
                 {"read_share", r3(offered > 0 ? read_per_s / offered : 0)},
                 {"unstamped_events", r.unstamped_events},
                 {"lag_ms", to_json(lag)},
                 {"lag_max_all_ms", r3(r.lag_max_all_ms)},
                 {"bench_cpu_share", r3(r.window_s > 0 ? r.bench_cpu_s / r.window_s : 0)},
                 {"kept_up", kept_up}};
  if (!r.first_error.empty()) o["first_error"] = r.first_error;
  if (r.mock_cpu_s && r.window_s > 0) o["mock_cpu_share"] = r3(*r.mock_cpu_s / r.window_s);
  if (t.pid && r.cpu_s && r.window_events > 0 && r.window_s > 0) {
    const double events = static_cast<double>(r.window_events);
    o["cpu_us_per_event"] = std::round(*r.cpu_s * 1e6 / events * 100) / 100;
    if (r.system_cpu_s) {
      o["system_cpu_us_per_event"] = std::round(*r.system_cpu_s * 1e6 / events * 100) / 100;
    }
    o["cpu_share"] = r3(*r.cpu_s / r.window_s);
  }
  return o;
}

}  // namespace

boost::json::object run_streaming_throughput(bench_context& ctx) {
  const bool quick = ctx.options().quick;
  const std::vector<std::size_t> steps =
      quick ? std::vector<std::size_t>{200} : std::vector<std::size_t>{1000, 2000, 4000};
  step_shape shape;
  shape.model = quick ? bench_models::stamped_stream_quick : bench_models::stamped_stream;
  shape.events = quick ? bench_models::stamped_events_quick : bench_models::stamped_events;
  shape.ramp = milliseconds(quick ? 500 : 1000);
  shape.warmup = milliseconds(quick ? 500 : 1000);
  shape.window = milliseconds(quick ? 2000 : 5000);

  json::object targets;
  std::map<std::string, std::size_t> highest;
  std::map<std::string, bool> behind;
  std::map<std::string, json::object> base;  // each target's first step
  // Runs one step of a target and records it; true if the target kept up.
  auto step = [&](const target& t, std::size_t streams, bool first) {
    shape.streams = streams;
    std::cerr << "tether-bench:   " << t.name << ", " << shape.streams << " streams\n";
    const auto r = run_step(ctx, t, shape);
    const auto lag = summarize(r.lag_ms);
    const double offered = static_cast<double>(shape.streams) * 1000.0 /
                           bench_models::stamped_interval_ms * r.window_s;
    const bool kept_up = r.complete == shape.streams && lag.n > 0 &&
                         lag.p99 <= kept_up_lag_p99_ms &&
                         static_cast<double>(r.window_events) >= kept_up_read_share * offered;
    auto o = step_json(r, shape, t, kept_up);
    if (kept_up) highest[t.name] = std::max(highest[t.name], shape.streams);
    if (first) base[t.name] = o;
    if (!targets.contains(t.name)) targets[t.name] = json::object{{"steps", json::object{}}};
    targets[t.name].as_object()["steps"].as_object()["n" + std::to_string(shape.streams)] =
        std::move(o);
    return kept_up;
  };
  for (std::size_t s = 0; s < steps.size(); ++s) {
    for (const auto* t : ctx.rotation(s)) {
      if (behind[t->name] || ctx.out_of_time()) continue;
      if (!step(*t, steps[s], s == 0)) behind[t->name] = true;
    }
  }
  // A target behind at the first step: fewer streams, until one it keeps up with, so that its
  // ceiling is known (and, when direct is behind too, the load generator's).
  if (!quick) {
    std::size_t round = steps.size();
    const std::size_t first = steps.front();
    for (std::size_t n : {first * 3 / 4, first / 2, first / 4}) {
      for (const auto* t : ctx.rotation(round)) {
        if (highest[t->name] > 0 || ctx.out_of_time()) continue;
        step(*t, n, false);
      }
      ++round;
    }
  }
  for (auto& [name, o] : targets) {
    o.as_object()["highest_streams_kept_up"] = highest[name];
  }

  json::object derived;
  json::array checks;
  auto figure = [&](const std::string& t,
                    std::initializer_list<std::string_view> path) -> std::optional<double> {
    if (!base.count(t)) return std::nullopt;
    const json::value* v = nullptr;
    const json::object* o = &base[t];
    for (auto key : path) {
      v = o->if_contains(key);
      if (v == nullptr) return std::nullopt;
      if (v->is_object()) o = &v->as_object();
    }
    if (v == nullptr || !v->is_number()) return std::nullopt;
    return v->to_number<double>();
  };
  const std::string at = std::to_string(steps.front()) + " streams x 50 events/s";
  const auto tether_cpu = figure("tether", {"cpu_us_per_event"});
  const auto nginx_cpu = figure("nginx", {"cpu_us_per_event"});
  if (tether_cpu && nginx_cpu && *nginx_cpu > 0) {
    const double ratio = *tether_cpu / *nginx_cpu;
    derived["cpu_per_event_ratio_tether_over_nginx"] = r3(ratio);
    checks.push_back(
        check("tether", "CPU per relayed event / nginx's, " + at, ratio, "<= 1.5", ratio <= 1.5));
  }
  // The same ratio at every step both proxies ran: at the first, both may be saturated.
  if (const auto* ts = targets.if_contains("tether"); ts && targets.contains("nginx")) {
    const auto& ns = targets.at("nginx").at("steps").as_object();
    for (const auto& [n, st] : ts->at("steps").as_object()) {
      const auto* other = ns.if_contains(n);
      const auto* a = st.as_object().if_contains("cpu_us_per_event");
      const auto* b = other ? other->as_object().if_contains("cpu_us_per_event") : nullptr;
      if (a == nullptr || b == nullptr || b->to_number<double>() <= 0) continue;
      derived["cpu_per_event_ratio_tether_over_nginx_" + std::string(n)] =
          r3(a->to_number<double>() / b->to_number<double>());
    }
  }
  for (const char* p : {"nginx", "tether"}) {
    const auto p50 = figure(p, {"lag_ms", "p50"});
    const auto p99 = figure(p, {"lag_ms", "p99"});
    const auto d50 = figure("direct", {"lag_ms", "p50"});
    const auto d99 = figure("direct", {"lag_ms", "p99"});
    if (p50 && d50) derived[std::string(p) + "_added_lag_p50_ms"] = r3(*p50 - *d50);
    if (p99 && d99) derived[std::string(p) + "_added_lag_p99_ms"] = r3(*p99 - *d99);
  }
  if (const auto p99 = figure("tether", {"lag_ms", "p99"})) {
    const auto complete = figure("tether", {"complete"}).value_or(0);
    const bool whole = complete == static_cast<double>(steps.front());
    checks.push_back(check("tether", "relay lag p99 (ms), " + at, *p99, "<= 2 (every stream whole)",
                           whole && *p99 <= 2.0));
  }
  return {{"name", "streaming_throughput"},
          {"config",
           {{"model", shape.model},
            {"events_per_stream", shape.events},
            {"interval_ms", bench_models::stamped_interval_ms},
            {"steps", json::value_from(steps)},
            {"ramp_ms", shape.ramp.count()},
            {"warmup_ms", shape.warmup.count()},
            {"window_ms", shape.window.count()},
            {"kept_up",
             "every stream whole, lag p99 <= 50 ms, >= 95% of the offered events read "
             "in the window"}}},
          {"targets", std::move(targets)},
          {"derived", std::move(derived)},
          {"checks", std::move(checks)}};
}

}  // namespace tether::bench
