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

}  // namespace tether::bench
