#include "bench/bench/open_loop.hpp"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <map>

#include <boost/asio/steady_timer.hpp>

#include "bench/bench/percentiles.hpp"

namespace tether::bench {

open_loop_result run_open_loop(bench_context& ctx, const target& t, const open_loop_spec& spec) {
  open_loop_result out;
  std::vector<std::shared_ptr<client_connection>> conns;
  std::vector<client_connection*> idle;

  // Warm the pool: each connection opened and one exchange through it (tether's and nginx's
  // upstream pools warm with it), so no connect is timed.
  std::size_t warming = 0;
  for (unsigned i = 0; i < spec.connections; ++i) {
    conns.push_back(std::make_shared<client_connection>(ctx.ioc(), t.endpoint));
    ++warming;
    conns.back()->exchange(spec.request, [&, c = conns.back().get()](exchange_result&) {
      --warming;
      idle.push_back(c);
    });
  }
  ctx.run_until([&] { return warming == 0; }, milliseconds(5000));

  const auto count = static_cast<std::size_t>(spec.rate_per_s *
                                              std::chrono::duration<double>(spec.duration).count());
  const std::chrono::duration<double> interval(1.0 / spec.rate_per_s);
  const auto start = steady::now() + milliseconds(1);
  auto moment = [&](std::size_t k) {
    return start + std::chrono::duration_cast<steady::duration>(interval * static_cast<double>(k));
  };
  std::deque<steady::time_point> waiting;  // due, no connection free yet
  std::size_t next = 0;
  std::size_t active = 0;
  auto last_done = start;

  std::function<void(client_connection*, steady::time_point)> send = [&](client_connection* c,
                                                                         steady::time_point at) {
    ++active;
    out.peak_in_flight = std::max(out.peak_in_flight, active);
    if (steady::now() - at > milliseconds(1)) ++out.late_sends;
    c->exchange(spec.request, [&, c, at](exchange_result& r) {
      --active;
      last_done = steady::now();
      if (r.ok && r.status >= 200 && r.status < 300) {
        ++out.ok;
        out.latencies_ms.push_back(ms_between(at, last_done));
        if (spec.stall) out.by_moment.emplace_back(ms_between(start, at), out.latencies_ms.back());
      } else {
        ++out.failed;
      }
      if (waiting.empty()) {
        idle.push_back(c);
        return;
      }
      const auto due = waiting.front();
      waiting.pop_front();
      send(c, due);
    });
  };
  auto free_connection = [&]() -> client_connection* {
    if (!idle.empty()) {
      auto* c = idle.back();
      idle.pop_back();
      return c;
    }
    if (conns.size() >= spec.max_connections) return nullptr;
    conns.push_back(std::make_shared<client_connection>(ctx.ioc(), t.endpoint));
    return conns.back().get();
  };

  // One timer for the schedule: each wake sends every request whose moment has come, so a late
  // wake sends a batch rather than drifting the schedule.
  boost::asio::steady_timer timer(ctx.ioc());
  std::function<void()> tick = [&] {
    const auto now = steady::now();
    for (; next < count && moment(next) <= now; ++next) {
      if (auto* c = free_connection()) {
        send(c, moment(next));
      } else {
        waiting.push_back(moment(next));
      }
    }
    if (next >= count) return;
    timer.expires_at(moment(next));
    timer.async_wait([&](boost::system::error_code ec) {
      if (!ec) tick();
    });
  };
  // The stall runs on timers of this loop, so the schedule goes on while the target is stopped.
  // Whatever ends the run, the processes are continued.
  boost::asio::steady_timer stop_timer(ctx.ioc());
  boost::asio::steady_timer resume_timer(ctx.ioc());
  struct continue_guard {
    const std::optional<open_loop_stall>& stall;
    ~continue_guard() {
      if (stall)
        for (int pid : stall->pids) ::kill(pid, SIGCONT);
    }
  } guard{spec.stall};
  if (spec.stall) {
    stop_timer.expires_at(start + spec.stall->at);
    stop_timer.async_wait([&](boost::system::error_code ec) {
      if (ec) return;
      for (int pid : spec.stall->pids) ::kill(pid, SIGSTOP);
    });
    resume_timer.expires_at(start + spec.stall->at + spec.stall->length);
    resume_timer.async_wait([&](boost::system::error_code ec) {
      if (ec) return;
      for (int pid : spec.stall->pids) ::kill(pid, SIGCONT);
    });
  }
  tick();
  // In-flight requests finish after the schedule ends; a stuck one is aborted, not waited for.
  ctx.run_until([&] { return next >= count && active == 0 && waiting.empty(); },
                spec.duration + milliseconds(10000));
  timer.cancel();
  stop_timer.cancel();
  resume_timer.cancel();
  out.scheduled = next;
  out.unfinished = waiting.size();
  for (auto& c : conns) {
    if (c->busy()) {
      ++out.unfinished;
      c->abort();
    }
  }
  // The cancelled wait's handler runs here, while what it refers to is still alive.
  ctx.run_for(milliseconds(1));
  out.elapsed_s = std::chrono::duration<double>(last_done - start).count();
  std::sort(out.by_moment.begin(), out.by_moment.end());
  return out;
}

std::optional<double> recovery_ms(const std::vector<std::pair<double, double>>& by_moment,
                                  double resume_ms, double threshold_ms, std::size_t run) {
  std::size_t in_a_row = 0;
  for (std::size_t i = 0; i < by_moment.size(); ++i) {
    const auto [moment, latency] = by_moment[i];
    if (moment < resume_ms) continue;
    in_a_row = latency <= threshold_ms ? in_a_row + 1 : 0;
    if (in_a_row == run) return by_moment[i + 1 - run].first - resume_ms;
  }
  return std::nullopt;
}

std::vector<timeline_step> timeline(const std::vector<std::pair<double, double>>& by_moment,
                                    double from_ms, double to_ms, double step_ms) {
  std::map<std::size_t, std::vector<double>> steps;
  for (const auto& [moment, latency] : by_moment) {
    if (moment < from_ms || moment >= to_ms) continue;
    steps[static_cast<std::size_t>((moment - from_ms) / step_ms)].push_back(latency);
  }
  std::vector<timeline_step> out;
  for (auto& [k, latencies] : steps) {
    const auto n = latencies.size();
    const auto s = summarize(std::move(latencies));
    out.push_back({from_ms + static_cast<double>(k) * step_ms, n, s.p50, s.p99});
  }
  return out;
}

}  // namespace tether::bench
