// Scenario 6: N concurrent slow streams (one event a second) held open through each proxy; its
// resident set once every stream has delivered an event, against the RSS it had idle before the
// bench's first request. (RSS - idle RSS) / N is an upper bound of the bytes one in-flight
// stream costs: whatever earlier scenarios grew is charged to the streams too.
// Then every caller leaves at once: the mock must see every stream closed (a mass cancel).
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include <boost/asio/post.hpp>
#include <boost/json.hpp>

#include "bench/bench/percentiles.hpp"
#include "bench/bench/scenarios.hpp"

namespace tether::bench {
namespace {

namespace json = boost::json;

struct hold_result {
  std::size_t held = 0;  // streams that delivered an event
  std::optional<double> rss_kib;
  double ramp_s = 0;
  std::size_t failed = 0;
  std::size_t mock_active_after_close = 0;
  double mock_drain_ms = 0;
};

hold_result hold_streams(bench_context& ctx, const target& t, std::size_t n) {
  hold_result out;
  ctx.mock().reset();
  // Streams waiting for their first event (a second away); well below the listen backlog (4096),
  // so no SYN is dropped and retried a second later.
  const std::size_t max_connecting = 2000;
  std::vector<std::shared_ptr<client_connection>> conns;
  std::size_t connecting = 0, started = 0;
  const auto req = ctx.request(t, bench_models::slow_stream, true);
  const auto begin = steady::now();
  std::function<void()> launch_more = [&] {
    while (started < n && connecting < max_connecting) {
      auto c = std::make_shared<client_connection>(ctx.ioc(), t.endpoint);
      conns.push_back(c);
      ++started;
      ++connecting;
      auto got_event = std::make_shared<bool>(false);
      c->on_first_event([&, got_event] {
        *got_event = true;
        --connecting;
        ++out.held;
        // Posted: starting connections inside this callback would nest handlers deeply.
        boost::asio::post(ctx.ioc(), [&] { launch_more(); });
      });
      c->exchange(req, [&, got_event](exchange_result&) {
        // A slow stream that ends (or fails) within the test was not held.
        ++out.failed;
        if (*got_event) {
          --out.held;
          return;
        }
        --connecting;
        boost::asio::post(ctx.ioc(), [&] { launch_more(); });
      });
    }
  };
  launch_more();
  ctx.run_until([&] { return out.held + out.failed >= n; }, milliseconds(60000));
  out.ramp_s = std::chrono::duration<double>(steady::now() - begin).count();
  // Let every stream settle into its steady state (an event a second) before sampling.
  ctx.run_for(milliseconds(1200));
  out.rss_kib = ctx.rss_kib(t);
  const auto closing = steady::now();
  for (auto& c : conns) c->abort();
  conns.clear();
  for (int i = 0; i < 100; ++i) {
    auto stats = ctx.mock().stats();
    out.mock_active_after_close = stats.at("active").to_number<std::size_t>();
    if (out.mock_active_after_close == 0) break;
    ctx.pause(milliseconds(100));
  }
  out.mock_drain_ms = std::chrono::duration<double, std::milli>(steady::now() - closing).count();
  ctx.pause(milliseconds(500));
  return out;
}

// A proxy holds two sockets per stream (caller and upstream): its descriptor limit caps the
// streams it can hold, whatever its memory.
std::size_t stream_ceiling(const std::vector<target>& targets) {
  std::size_t ceiling = 10000;
  for (const auto& t : targets) {
    if (!t.pid) continue;
    std::ifstream limits("/proc/" + std::to_string(*t.pid) + "/limits");
    std::string line;
    while (std::getline(limits, line)) {
      if (line.rfind("Max open files", 0) != 0) continue;
      std::istringstream in(line.substr(14));
      std::size_t soft = 0;
      if (in >> soft)
        ceiling = std::min(ceiling, (soft - std::min<std::size_t>(soft, 200)) / 200 * 100);
    }
  }
  return ceiling;
}

}  // namespace

boost::json::object run_memory(bench_context& ctx, const std::map<std::string, double>& idle_kib) {
  const bool quick = ctx.options().quick;
  // 10,000 streams need 20,000 descriptors in a proxy; under a lower hard limit (containers
  // often cap it at 20,000 and forbid raising it) the largest size is what the limit allows.
  const std::size_t ceiling = stream_ceiling(ctx.targets());
  std::vector<std::size_t> sizes =
      quick ? std::vector<std::size_t>{1000} : std::vector<std::size_t>{1000, ceiling};
  json::object targets;
  json::array checks;
  std::size_t round = 0;
  for (std::size_t n : sizes) {
    for (const auto* t : ctx.rotation(round++)) {
      if (!t->pid || ctx.out_of_time()) continue;
      auto r = hold_streams(ctx, *t, n);
      auto idle = idle_kib.count(t->name) ? idle_kib.at(t->name) : 0.0;
      double per_stream = r.rss_kib && r.held > 0 ? (*r.rss_kib - idle) * 1024.0 / r.held : 0;
      json::object o{{"streams", n},
                     {"held", r.held},
                     {"failed", r.failed},
                     {"ramp_s", std::round(r.ramp_s * 100) / 100},
                     {"idle_rss_kib", idle},
                     {"rss_kib", r.rss_kib ? *r.rss_kib : 0.0},
                     {"bytes_per_stream", std::round(per_stream)},
                     {"mock_active_after_close", r.mock_active_after_close},
                     {"mock_drain_ms", std::round(r.mock_drain_ms)}};
      if (!targets.contains(t->name)) targets[t->name] = json::object{};
      targets[t->name].as_object()["n" + std::to_string(n)] = std::move(o);
      if (t->name == "tether" && n == sizes.back()) {
        checks.push_back(check(
            "tether", "RSS per in-flight stream at " + std::to_string(n) + " (KiB)",
            per_stream / 1024, "<= 64", r.held == n && per_stream > 0 && per_stream <= 64 * 1024));
        checks.push_back(check("tether", "streams held of " + std::to_string(n),
                               static_cast<double>(r.held), "== " + std::to_string(n),
                               r.held == n));
      }
    }
  }
  return {{"name", "memory"},
          {"config",
           {{"model", bench_models::slow_stream},
            {"streams", json::value_from(sizes)},
            {"requested_streams", 10000},
            {"descriptor_ceiling", ceiling},
            {"max_connecting", 2000}}},
          {"targets", std::move(targets)},
          {"checks", std::move(checks)}};
}

}  // namespace tether::bench
