#include "bench/bench/closed_loop.hpp"

namespace tether::bench {

closed_loop_result run_closed_loop(bench_context& ctx, const target& t,
                                   const closed_loop_spec& spec) {
  closed_loop_result out;
  std::vector<std::shared_ptr<client_connection>> conns;
  std::size_t issued = 0;
  std::size_t active = 0;
  const auto start = steady::now();
  const auto stop_issuing = start + spec.duration;
  auto last_done = start;

  std::function<void(client_connection&)> next = [&](client_connection& c) {
    if (issued >= spec.max_requests || steady::now() >= stop_issuing) return;
    ++active;
    const auto k = issued++;
    c.exchange(spec.make(k), [&, conn = &c, k](exchange_result& r) {
      --active;
      last_done = steady::now();
      r.ok&& r.status >= 200 && r.status < 300 ? ++out.ok : ++out.failed;
      out.results.push_back(std::move(r));
      out.request_index.push_back(k);
      next(*conn);
    });
  };
  for (unsigned i = 0; i < spec.concurrency; ++i) {
    conns.push_back(std::make_shared<client_connection>(ctx.ioc(), t.endpoint));
    next(*conns.back());
  }
  // In-flight requests finish after the issuing stops; a stuck one is aborted, not waited for.
  ctx.run_until([&] { return active == 0; }, spec.duration + milliseconds(10000));
  for (auto& c : conns) {
    if (c->busy()) {
      ++out.unfinished;
      c->abort();
    }
  }
  out.elapsed_s = std::chrono::duration<double>(last_done - start).count();
  return out;
}

double level_samples::rps(const std::string& name) const {
  auto s = seconds.find(name);
  auto n = ok.find(name);
  if (s == seconds.end() || n == ok.end() || s->second <= 0) return 0;
  return static_cast<double>(n->second) / s->second;
}

namespace {

double per_request_us(const std::map<std::string, double>& seconds_of,
                      const std::map<std::string, std::size_t>& ok, const std::string& name) {
  auto c = seconds_of.find(name);
  auto n = ok.find(name);
  if (c == seconds_of.end() || n == ok.end() || n->second == 0) return 0;
  return c->second * 1e6 / static_cast<double>(n->second);
}

}  // namespace

double level_samples::cpu_us_per_request(const std::string& name) const {
  return per_request_us(cpu_s, ok, name);
}

double level_samples::system_cpu_us_per_request(const std::string& name) const {
  return per_request_us(system_cpu_s, ok, name);
}

level_samples sample_level(bench_context& ctx, const std::vector<const target*>& targets,
                           unsigned concurrency, std::size_t rounds, milliseconds slice) {
  level_samples out;
  for (std::size_t r = 0; r < rounds && !ctx.out_of_time(); ++r) {
    for (std::size_t i = 0; i < targets.size(); ++i) {
      const target& t = *targets[(i + r) % targets.size()];
      auto req = ctx.request(t, bench_models::immediate, false);
      const auto cpu_before = ctx.cpu_seconds(t);
      const auto system_before = ctx.system_cpu_seconds(t);
      auto res = run_closed_loop(ctx, t,
                                 {concurrency, slice, 2'000'000, [&](std::size_t) { return req; }});
      if (const auto cpu_after = ctx.cpu_seconds(t); cpu_before && cpu_after)
        out.cpu_s[t.name] += *cpu_after - *cpu_before;
      if (const auto system_after = ctx.system_cpu_seconds(t); system_before && system_after)
        out.system_cpu_s[t.name] += *system_after - *system_before;
      for (const auto& e : res.results) {
        if (e.ok && e.status == 200) out.latencies_ms[t.name].push_back(e.latency_ms);
      }
      out.ok[t.name] += res.ok;
      out.failed[t.name] += res.failed + res.unfinished;
      out.seconds[t.name] += res.elapsed_s;
    }
  }
  return out;
}

void warm_up(bench_context& ctx, const std::vector<const target*>& targets, unsigned concurrency) {
  for (const auto* t : targets) {
    auto req = ctx.request(*t, bench_models::immediate, false);
    run_closed_loop(ctx, *t,
                    {concurrency, milliseconds(300), 100000, [&](std::size_t) { return req; }});
  }
}

}  // namespace tether::bench
