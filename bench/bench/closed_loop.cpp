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
    c.exchange(spec.make(issued++), [&, conn = &c](exchange_result& r) {
      --active;
      last_done = steady::now();
      r.ok&& r.status >= 200 && r.status < 300 ? ++out.ok : ++out.failed;
      out.results.push_back(std::move(r));
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

double level_samples::cpu_us_per_request(const std::string& name) const {
  auto c = cpu_s.find(name);
  auto n = ok.find(name);
  if (c == cpu_s.end() || n == ok.end() || n->second == 0) return 0;
  return c->second * 1e6 / static_cast<double>(n->second);
}

level_samples sample_level(bench_context& ctx, const std::vector<const target*>& targets,
                           unsigned concurrency, std::size_t rounds, milliseconds slice) {
  level_samples out;
  for (std::size_t r = 0; r < rounds && !ctx.out_of_time(); ++r) {
    for (std::size_t i = 0; i < targets.size(); ++i) {
      const target& t = *targets[(i + r) % targets.size()];
      auto req = ctx.request(t, bench_models::immediate, false);
      const auto cpu_before = ctx.cpu_seconds(t);
      auto res = run_closed_loop(ctx, t,
                                 {concurrency, slice, 2'000'000, [&](std::size_t) { return req; }});
      if (const auto cpu_after = ctx.cpu_seconds(t); cpu_before && cpu_after)
        out.cpu_s[t.name] += *cpu_after - *cpu_before;
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
