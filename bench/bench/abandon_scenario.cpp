// Scenario 12 (issue #60): callers against a real engine (llama.cpp's llama-server, 2 slots), a
// share of them leaving mid-generation or hitting a deadline, direct / through nginx / through
// tether interleaved. Judged from the engine's own log (engine_log), not from any proxy's:
//  * from the caller leaving to the engine's slot going idle (`stop processing`), in ms and in
//    the engine's decode steps;
//  * tokens the engine decoded after the caller left: generated for nobody, per 1,000 requests;
//  * how long requests waited inside the engine for a slot (deferred → launched).
// The verdict is in the engine's own unit, not in time (a decode step on a loaded machine varies
// several-fold, a token count does not): through tether, for every caller who left while the
// engine ran (or later launched) its task, the tokens the engine decoded for that task after the
// leave, its `n_decoded = k` lines stamped later, are at most 2; streamed and non-streamed
// requests each judged, each with enough leaves to judge.
// The engine logs no request id, but it logs each task's max_tokens (n_decoded + n_remaining):
// each request asks for 24 + (its number mod 32) tokens, so a task is the latest request of its
// max_tokens sent before the engine first logged the task (the same max_tokens comes back only
// 32 requests later, seconds apart). The engine's timestamps are its wall clock since its logger
// started; the offset to epoch ms is bracketed by requests (one was sent before the engine first
// logged it; its last token was logged before its answer arrived): first by a probe with a
// max_tokens of its own, then by every request matched.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json.hpp>

#include "bench/bench/engine_log.hpp"
#include "bench/bench/percentiles.hpp"
#include "bench/bench/scenarios.hpp"

namespace tether::bench {
namespace {

namespace json = boost::json;
namespace asio = boost::asio;

// The shape of the load (the same plan sequence for every target in a round).
struct abandon_shape {
  // max_tokens = base + (the request's number mod spread): 24..55, 39.5 on average.
  static constexpr unsigned max_tokens_base = 24;
  static constexpr unsigned max_tokens_spread = 32;
  static constexpr unsigned probe_max_tokens = 4;
  // The verdict: at most this many tokens decoded after a leave, over at least this many leaves
  // the engine ran, streamed and non-streamed each.
  static constexpr std::size_t max_tokens_after_leave = 2;
  static constexpr std::size_t min_leaves_judged = 3;
};

// Shares of the requests: caller leaves a stream after some events; leaves a non-stream request
// after some time; a deadline passes (stream or not). The rest are served whole.
struct leave_shares {
  double stream_abort = 0.10;
  double nonstream_abort = 0.10;
  double deadline_stream = 0.05;
  double deadline_nonstream = 0.05;
};

// The load of one phase per target. The full run: 3 callers in a closed loop on the engine's 2
// slots (one always waits in the proxy's queue) for a fixed time. The short run (CI's) must
// judge every time, on a machine of any speed: a fixed number of requests per target (the same
// plans, so the same leavers, for each), twice the shares of leavers, and 2 callers, so that a
// non-stream caller's leave 150-500 ms after sending finds its request running in the engine
// rather than queued in tether, beside the other caller's request. Its load goes through tether
// alone (the direct target, when given, serves the clock probe): the direct and nginx paths do
// not change with tether's code, and the full run measures them.
struct load_shape {
  unsigned callers = 3;
  leave_shares shares;
  std::size_t requests_per_phase = SIZE_MAX;  // and at most `phase` long
  milliseconds phase{15000};
  std::size_t rounds = 4;
  bool tether_only = false;
};

load_shape shape_for(bool quick) {
  load_shape l;
  if (quick) {
    l.callers = 2;
    l.shares = {0.20, 0.20, 0.10, 0.10};
    l.requests_per_phase = 40;
    l.phase = milliseconds(90000);
    l.rounds = 1;
    l.tether_only = true;
  }
  return l;
}

enum class leave_kind { none, stream_abort, nonstream_abort, deadline_stream, deadline_nonstream };

const char* name_of(leave_kind k) {
  switch (k) {
    case leave_kind::none:
      return "served";
    case leave_kind::stream_abort:
      return "stream_abort";
    case leave_kind::nonstream_abort:
      return "nonstream_abort";
    case leave_kind::deadline_stream:
      return "deadline_stream";
    case leave_kind::deadline_nonstream:
      return "deadline_nonstream";
  }
  return "?";
}

struct plan {
  leave_kind kind = leave_kind::none;
  bool stream = false;
  unsigned abort_after_events = 0;  // stream_abort
  double leave_after_ms = 0;        // nonstream_abort: the caller's own timer; deadline_*: D
};

plan draw_plan(std::mt19937_64& rng, const leave_shares& shares) {
  std::uniform_real_distribution<double> u(0, 1);
  plan p;
  const double x = u(rng);
  const double a = shares.stream_abort;
  const double b = a + shares.nonstream_abort;
  const double c = b + shares.deadline_stream;
  const double d = c + shares.deadline_nonstream;
  if (x < a) {
    p.kind = leave_kind::stream_abort;
    p.stream = true;
    p.abort_after_events =
        std::uniform_int_distribution<unsigned>(3, abandon_shape::max_tokens_base - 4)(rng);
  } else if (x < b) {
    p.kind = leave_kind::nonstream_abort;
    p.leave_after_ms = std::uniform_real_distribution<double>(150, 500)(rng);
  } else if (x < c) {
    p.kind = leave_kind::deadline_stream;
    p.stream = true;
    // Whole ms: x-request-deadline-ms is an integer, and the caller's view must be tether's.
    p.leave_after_ms = std::round(std::uniform_real_distribution<double>(200, 600)(rng));
  } else if (x < d) {
    p.kind = leave_kind::deadline_nonstream;
    p.leave_after_ms = std::round(std::uniform_real_distribution<double>(200, 600)(rng));
  } else {
    p.stream = u(rng) < 0.5;
  }
  return p;
}

struct call {
  std::string target;
  std::uint64_t number = 0;
  unsigned max_tokens = 0;
  plan p;
  double sent_epoch = 0;
  std::optional<double> left_epoch;  // the caller left (closed, or its deadline passed)
  bool answered = false;             // a whole answer read before the caller left
  unsigned status = 0;
  double end_epoch = 0;  // the answer's end (answered)
  double latency_ms = 0;
  bool cut_at_phase_end = false;
};

// One caller of the closed loop: sends a request, leaves as its plan says, starts the next.
struct caller : std::enable_shared_from_this<caller> {
  bench_context& ctx;
  const target& t;
  std::vector<call>& calls;
  std::mt19937_64& rng;
  std::uint64_t& next_number;
  leave_shares shares;
  steady::time_point stop_at;
  std::size_t& started;  // this phase's requests, of at most `limit`
  std::size_t limit;
  std::shared_ptr<client_connection> conn;
  std::shared_ptr<asio::steady_timer> timer;
  std::size_t current = 0;
  bool in_flight = false;

  caller(bench_context& c, const target& tt, std::vector<call>& cs, std::mt19937_64& r,
         std::uint64_t& number, leave_shares s, steady::time_point stop, std::size_t& n,
         std::size_t most)
      : ctx(c),
        t(tt),
        calls(cs),
        rng(r),
        next_number(number),
        shares(s),
        stop_at(stop),
        started(n),
        limit(most) {}

  void leave(std::size_t i, std::optional<double> at = std::nullopt) {
    if (i != current || !in_flight) return;
    const double closed = conn->abort();
    calls[i].left_epoch = at.value_or(closed);
    timer->cancel();
    done();
  }

  // The phase is over and this request is still running: it is not counted.
  void cut() {
    if (!in_flight) return;
    calls[current].cut_at_phase_end = true;
    conn->abort();
    timer->cancel();
    in_flight = false;
  }

  void done() {
    in_flight = false;
    start();
  }

  void start() {
    if (steady::now() >= stop_at || started >= limit) return;
    ++started;
    call c;
    c.target = t.name;
    c.number = next_number++;
    c.max_tokens = abandon_shape::max_tokens_base +
                   static_cast<unsigned>(c.number % abandon_shape::max_tokens_spread);
    c.p = draw_plan(rng, shares);
    const bool tether = t.name == "tether";
    std::vector<std::string> headers;
    const bool deadline =
        c.p.kind == leave_kind::deadline_stream || c.p.kind == leave_kind::deadline_nonstream;
    if (deadline && tether) {
      headers.push_back("x-request-deadline-ms: " +
                        std::to_string(static_cast<long>(c.p.leave_after_ms)));
    }
    const std::string body =
        std::string(R"({"model":"abandon","stream":)") + (c.p.stream ? "true" : "false") +
        R"(,"max_tokens":)" + std::to_string(c.max_tokens) +
        R"(,"messages":[{"role":"user","content":"Tell me a long story about a lighthouse."}]})";
    auto req =
        make_request(t.endpoint.address().to_string() + ":" + std::to_string(t.endpoint.port()),
                     "/v1/chat/completions", body, headers);
    calls.push_back(c);
    current = calls.size() - 1;
    in_flight = true;
    // A new connection per request: llama-server closes a connection after a streamed answer.
    conn = std::make_shared<client_connection>(ctx.ioc(), t.endpoint);
    timer = std::make_shared<asio::steady_timer>(ctx.ioc());
    const std::size_t i = current;
    auto self = shared_from_this();
    conn->exchange(req, [self, i](exchange_result& r) {
      if (i != self->current || !self->in_flight) return;
      auto& cl = self->calls[i];
      cl.status = r.status;
      cl.latency_ms = r.latency_ms;
      cl.end_epoch = r.sent_epoch_ms + r.latency_ms;
      const bool deadline =
          cl.p.kind == leave_kind::deadline_stream || cl.p.kind == leave_kind::deadline_nonstream;
      // An answer that ended after the deadline (tether's 504, or a stream it cut) is the
      // deadline passing, not an answer served.
      if (deadline && r.latency_ms >= cl.p.leave_after_ms) {
        cl.left_epoch = r.sent_epoch_ms + cl.p.leave_after_ms;
      } else {
        cl.answered = r.ok && r.status == 200;
      }
      self->timer->cancel();
      self->done();
    });
    calls[i].sent_epoch = epoch_ms_now();
    switch (c.p.kind) {
      case leave_kind::none:
        break;
      case leave_kind::stream_abort: {
        auto seen = std::make_shared<unsigned>(0);
        const unsigned k = c.p.abort_after_events;
        conn->on_event([self, i, seen, k](std::string_view, double) {
          if (++*seen != k) return;
          // Not inside the connection's own read handler: it goes on parsing after this.
          asio::post(self->ctx.ioc(), [self, i] { self->leave(i); });
        });
        break;
      }
      case leave_kind::nonstream_abort:
      case leave_kind::deadline_stream:
      case leave_kind::deadline_nonstream: {
        // Through tether a deadline is its to enforce: the caller waits for its answer (and
        // gives up 2 s later). Elsewhere the caller's own timeout is the deadline.
        const bool tether_deadline = tether && c.p.kind != leave_kind::nonstream_abort;
        const double wait = c.p.leave_after_ms + (tether_deadline ? 2000 : 0);
        const double planned = calls[i].sent_epoch + c.p.leave_after_ms;
        timer->expires_after(std::chrono::microseconds(static_cast<long>(wait * 1000)));
        timer->async_wait([self, i, planned, kind = c.p.kind](boost::system::error_code ec) {
          if (ec) return;
          if (kind == leave_kind::nonstream_abort) return self->leave(i);
          self->leave(i, planned);
        });
        break;
      }
    }
  }
};

struct target_figures {
  std::size_t requests = 0, answered = 0, left = 0, cut = 0, failed = 0;
  std::map<unsigned, std::size_t> statuses;
  std::map<std::string, std::size_t> left_by_kind;
  std::size_t never_reached_engine = 0;  // left before the engine saw it (tether's queue)
  std::size_t left_while_queued_in_engine = 0;
  std::size_t launched_after_left = 0;  // the engine started work whose caller had gone
  std::size_t noticed = 0;              // the engine logged `cancel task` for it
  std::vector<double> leave_to_idle_ms;
  std::map<std::string, std::vector<double>> leave_to_idle_by_kind;
  std::vector<double> leave_to_cancel_ms;
  std::size_t tokens_after_leave = 0;
  // Per leave the engine ran (its task launched before or after it): the tokens decoded after.
  std::vector<double> tokens_after_streamed_leave, tokens_after_nonstreamed_leave;
  std::map<std::string, std::vector<double>> tokens_after_leave_by_kind;
  std::size_t tokens_total = 0;
  std::vector<double> queued_in_engine_ms;  // every launched request: deferred → launched
  std::size_t deferred = 0;
  std::vector<double> step_ms;  // decode steps: gaps between one task's consecutive tokens
  std::vector<double> answered_latency_ms;
};

}  // namespace

boost::json::object run_abandon(bench_context& ctx) {
  const auto& log_path = ctx.options().engine_log;
  if (log_path.empty()) return {{"name", "abandon"}, {"skipped", "no --engine-log"}};
  const bool quick = ctx.options().quick;
  const load_shape load = shape_for(quick);
  const std::size_t rounds = load.rounds;
  const milliseconds phase = load.phase;
  const leave_shares shares = load.shares;
  engine_log log(log_path);
  std::vector<call> calls;
  std::uint64_t next_number = 0;
  // The clock probe: one request of its own max_tokens, straight to the engine, engine idle.
  double probe_sent = 0, probe_end = 0;
  if (const auto* direct = ctx.find("direct")) {
    const std::string body = R"({"model":"abandon","max_tokens":)" +
                             std::to_string(abandon_shape::probe_max_tokens) +
                             R"(,"messages":[{"role":"user","content":"clock"}]})";
    auto conn = std::make_shared<client_connection>(ctx.ioc(), direct->endpoint);
    bool probed = false;
    conn->exchange(make_request(direct->endpoint.address().to_string() + ":" +
                                    std::to_string(direct->endpoint.port()),
                                "/v1/chat/completions", body),
                   [&](exchange_result& r) {
                     probed = r.ok;
                     probe_sent = r.sent_epoch_ms;
                     probe_end = r.sent_epoch_ms + r.latency_ms;
                   });
    ctx.run_until([&] { return probed; }, milliseconds(20000));
  }
  std::size_t incomplete_phases = 0;

  for (std::size_t r = 0; r < rounds && !ctx.out_of_time(); ++r) {
    for (const auto* t : ctx.rotation(r)) {
      if (load.tether_only && t->name != "tether") continue;
      // The same plans, in the same order, for every target of a round.
      std::mt19937_64 rng(7000 + r);
      std::vector<std::shared_ptr<caller>> callers;
      const auto stop_at = steady::now() + phase;
      std::size_t started = 0;
      for (unsigned i = 0; i < load.callers; ++i) {
        callers.push_back(std::make_shared<caller>(ctx, *t, calls, rng, next_number, shares,
                                                   stop_at, started, load.requests_per_phase));
        callers.back()->start();
      }
      ctx.run_until(
          [&] {
            return (steady::now() >= stop_at || started >= load.requests_per_phase) &&
                   std::none_of(callers.begin(), callers.end(),
                                [](const auto& c) { return c->in_flight; });
          },
          phase + milliseconds(15000));
      for (auto& c : callers) c->cut();
      // The engine's work of this phase ends (orphans included) before the next phase starts,
      // seen in its log: asking the engine would be traffic to it.
      const bool idle = ctx.run_until(
          [&] {
            log.poll();
            return log.idle();
          },
          milliseconds(20000));
      if (!idle) ++incomplete_phases;
      ctx.pause(milliseconds(200));
    }
  }
  log.poll();

  auto first_sight = [](const engine_task& task) {
    double at = 1e300;
    for (const auto& o : {task.posted_ms, task.deferred_ms, task.launched_ms}) {
      if (o) at = std::min(at, *o);
    }
    if (!task.token_ms.empty()) at = std::min(at, task.token_ms.front());
    return at;
  };
  // epoch = engine + offset: offset >= sent - first sight; offset <= answer end - last token.
  double lower = -1e300, upper = 1e300;
  auto bracket = [&](double sent, std::optional<double> end, const engine_task& task) {
    lower = std::max(lower, sent - first_sight(task));
    if (end && !task.token_ms.empty()) upper = std::min(upper, *end - task.token_ms.back());
  };
  for (const auto& [id, task] : log.tasks()) {
    if (task.max_tokens == abandon_shape::probe_max_tokens && probe_end > 0) {
      bracket(probe_sent, probe_end, task);
    }
  }
  const bool probed = lower > -1e299 && upper < 1e299 && lower <= upper;
  const double coarse = probed ? (lower + upper) / 2 : 0;
  // Each task to the latest request of its max_tokens sent before the engine first logged it
  // (with 50 ms for the probe's uncertainty); a retry's second task goes to the same request.
  std::map<std::size_t, std::vector<const engine_task*>> tasks_of;  // by index into calls
  std::vector<const engine_task*> unmatched;
  for (const auto& [id, task] : log.tasks()) {
    const bool work = task.launched_ms || task.deferred_ms;
    if (!work || task.max_tokens == abandon_shape::probe_max_tokens) continue;
    const double seen = first_sight(task) + coarse;
    std::optional<std::size_t> best;
    if (task.max_tokens) {
      for (std::size_t i = 0; i < calls.size(); ++i) {
        if (calls[i].max_tokens != *task.max_tokens || calls[i].sent_epoch > seen + 50) continue;
        if (!best || calls[i].sent_epoch > calls[*best].sent_epoch) best = i;
      }
    }
    if (best) {
      tasks_of[*best].push_back(&task);
    } else {
      unmatched.push_back(&task);  // no token decoded: cancelled while deferred or in prefill
    }
  }
  // A request whose caller left with no task of its own: the nearest unmatched task the engine
  // first logged after it was sent (a task ended before its first token names no max_tokens).
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const auto& c = calls[i];
    if (tasks_of.count(i) || !c.left_epoch || unmatched.empty()) continue;
    auto nearest = unmatched.end();
    for (auto it = unmatched.begin(); it != unmatched.end(); ++it) {
      const double seen = first_sight(**it) + coarse;
      if (seen + 50 < c.sent_epoch || seen > *c.left_epoch + 50) continue;
      if (nearest == unmatched.end() || seen < first_sight(**nearest) + coarse) nearest = it;
    }
    if (nearest != unmatched.end()) {
      tasks_of[i].push_back(*nearest);
      unmatched.erase(nearest);
    }
  }
  for (const auto& [i, tasks] : tasks_of) {
    const auto& c = calls[i];
    for (const auto* task : tasks) {
      bracket(c.sent_epoch, c.answered ? std::optional<double>(c.end_epoch) : std::nullopt, *task);
    }
  }
  const bool calibrated = probed && lower <= upper;
  const double offset = calibrated ? (lower + upper) / 2 : coarse;

  std::map<std::string, target_figures> figs;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const auto& c = calls[i];
    auto& f = figs[c.target];
    ++f.requests;
    if (c.cut_at_phase_end) {
      ++f.cut;
      continue;
    }
    if (c.status != 0) ++f.statuses[c.status];
    auto it = tasks_of.find(i);
    const auto tasks = it == tasks_of.end() ? std::vector<const engine_task*>{} : it->second;
    bool launched = false;
    for (const auto* task : tasks) {
      f.tokens_total += task->token_ms.size();
      for (std::size_t k = 1; k < task->token_ms.size(); ++k) {
        f.step_ms.push_back(task->token_ms[k] - task->token_ms[k - 1]);
      }
      if (task->deferred_ms) ++f.deferred;
      if (!task->launched_ms) continue;
      launched = true;
      const double queued = task->deferred_ms ? *task->launched_ms - *task->deferred_ms : 0.0;
      f.queued_in_engine_ms.push_back(std::max(0.0, queued));
    }
    if (c.answered) {
      ++f.answered;
      f.answered_latency_ms.push_back(c.latency_ms);
      continue;
    }
    if (!c.left_epoch) {
      ++f.failed;
      continue;
    }
    ++f.left;
    ++f.left_by_kind[name_of(c.p.kind)];
    if (tasks.empty()) {
      ++f.never_reached_engine;  // held in tether's queue until the caller left
      continue;
    }
    if (!launched) {
      ++f.left_while_queued_in_engine;  // deferred, then cancelled before a slot freed
      continue;
    }
    const double left = *c.left_epoch - offset;  // on the engine's clock
    double stopped = -1e300;
    bool launched_after = false;
    std::size_t after = 0;
    for (const auto* task : tasks) {
      if (!task->launched_ms) continue;
      stopped = std::max(stopped, task->stopped_ms.value_or(1e300));
      if (*task->launched_ms > left) launched_after = true;
      after += tokens_after(*task, left);
      if (task->cancelled_ms && *task->cancelled_ms >= left) {
        ++f.noticed;
        f.leave_to_cancel_ms.push_back(*task->cancelled_ms - left);
      }
    }
    if (launched_after) ++f.launched_after_left;
    f.tokens_after_leave += after;
    (c.p.stream ? f.tokens_after_streamed_leave : f.tokens_after_nonstreamed_leave)
        .push_back(static_cast<double>(after));
    f.tokens_after_leave_by_kind[name_of(c.p.kind)].push_back(static_cast<double>(after));
    if (stopped > 1e299) continue;  // never stopped within the run: counted in incomplete phases
    const double to_idle = std::max(0.0, stopped - left);
    f.leave_to_idle_ms.push_back(to_idle);
    f.leave_to_idle_by_kind[name_of(c.p.kind)].push_back(to_idle);
  }

  json::object targets;
  json::array checks;
  double tether_step = 0;
  for (const auto& t : ctx.targets()) {
    if (load.tether_only && t.name != "tether") continue;
    auto& f = figs[t.name];
    auto step = summarize(f.step_ms);
    auto idle = summarize(f.leave_to_idle_ms);
    auto queued = summarize(f.queued_in_engine_ms);
    const double per_k = f.requests > 0 ? 1000.0 * static_cast<double>(f.tokens_after_leave) /
                                              static_cast<double>(f.requests)
                                        : 0;
    json::object statuses, left_by_kind, idle_by_kind, tokens_by_kind;
    for (const auto& [code, n] : f.statuses) statuses[std::to_string(code)] = n;
    for (const auto& [k, n] : f.left_by_kind) left_by_kind[k] = n;
    for (const auto& [k, v] : f.leave_to_idle_by_kind) idle_by_kind[k] = to_json(summarize(v));
    // Each leave's count, in the order left: a verdict can be traced to its request.
    for (const auto& [k, v] : f.tokens_after_leave_by_kind) {
      tokens_by_kind[k] = json::value_from(v);
    }
    auto in_steps = [&](double ms) {
      return step.p50 > 0 ? std::round(ms / step.p50 * 10) / 10 : 0.0;
    };
    if (t.name == "tether") tether_step = step.p50;
    targets[t.name] = json::object{
        {"requests", f.requests},
        {"answered", f.answered},
        {"left", f.left},
        {"left_by_kind", std::move(left_by_kind)},
        {"failed", f.failed},
        {"cut_at_phase_end", f.cut},
        {"statuses", std::move(statuses)},
        {"never_reached_engine", f.never_reached_engine},
        {"left_while_queued_in_engine", f.left_while_queued_in_engine},
        {"launched_after_caller_left", f.launched_after_left},
        {"engine_noticed_cancel", f.noticed},
        {"leave_to_engine_idle_ms", to_json(idle)},
        {"leave_to_engine_idle_by_kind_ms", std::move(idle_by_kind)},
        {"leave_to_engine_idle_p50_steps", in_steps(idle.p50)},
        {"leave_to_engine_idle_p99_steps", in_steps(idle.p99)},
        {"leave_to_engine_cancel_ms", to_json(summarize(f.leave_to_cancel_ms))},
        {"tokens_decoded", f.tokens_total},
        {"tokens_for_nobody", f.tokens_after_leave},
        {"tokens_for_nobody_per_1000_requests", std::round(per_k * 10) / 10},
        {"tokens_after_streamed_leave", to_json(summarize(f.tokens_after_streamed_leave))},
        {"tokens_after_nonstreamed_leave", to_json(summarize(f.tokens_after_nonstreamed_leave))},
        {"tokens_after_leave_by_kind", std::move(tokens_by_kind)},
        {"deferred_in_engine", f.deferred},
        {"queued_in_engine_ms", to_json(queued)},
        {"decode_step_ms", to_json(step)},
        {"answered_latency_ms", to_json(summarize(f.answered_latency_ms))}};
  }
  if (const auto* t = ctx.find("tether")) {
    // Section 6's bound, in the engine's own tokens: after each leave it decodes at most 2 more
    // for the request (the one under way, and one before the cancel is taken). Judged only on a
    // clock tied to the bench's well within a decode step, and over enough leaves of each kind.
    const auto& f = figs[t->name];
    const bool clock_ok = calibrated && (upper - lower) / 2 < tether_step / 4;
    for (const bool stream : {true, false}) {
      const auto& counts =
          stream ? f.tokens_after_streamed_leave : f.tokens_after_nonstreamed_leave;
      const std::string kind = stream ? "streamed" : "non-streamed";
      const double most = counts.empty() ? 0 : *std::max_element(counts.begin(), counts.end());
      checks.push_back(check(
          t->name, "tokens the engine decoded after a " + kind + " caller left, max", most,
          "<= " + std::to_string(abandon_shape::max_tokens_after_leave) +
              (clock_ok ? "" : " (the engine's clock is not tied to the bench's: no verdict)"),
          clock_ok && most <= static_cast<double>(abandon_shape::max_tokens_after_leave)));
      checks.push_back(check(t->name, kind + " leaves the engine was running",
                             static_cast<double>(counts.size()),
                             ">= " + std::to_string(abandon_shape::min_leaves_judged),
                             counts.size() >= abandon_shape::min_leaves_judged));
    }
  }
  return {{"name", "abandon"},
          {"config",
           {{"callers", load.callers},
            {"requests_per_phase", load.requests_per_phase == SIZE_MAX
                                       ? json::value(nullptr)
                                       : json::value(load.requests_per_phase)},
            {"max_tokens", "24 + (the request's number mod 32): 24..55"},
            {"rounds", rounds},
            {"phase_ms", phase.count()},
            {"share_stream_abort", shares.stream_abort},
            {"share_nonstream_abort", shares.nonstream_abort},
            {"share_deadline_stream", shares.deadline_stream},
            {"share_deadline_nonstream", shares.deadline_nonstream},
            {"max_tokens_after_leave", abandon_shape::max_tokens_after_leave},
            {"min_leaves_judged", abandon_shape::min_leaves_judged},
            {"stream_abort_after_events", "uniform 3..20 (every request asks for 24 or more)"},
            {"nonstream_abort_after_ms", "uniform 150..500 after send"},
            {"deadline_ms",
             "uniform 200..600 (tether: x-request-deadline-ms; else the caller's "
             "own timeout)"},
            {"engine_log", log_path}}},
          {"clock",
           {{"calibrated", calibrated},
            {"engine_tasks_unmatched", unmatched.size()},
            {"engine_to_epoch_offset_ms", std::round(offset * 1000) / 1000},
            {"uncertainty_ms", calibrated ? std::round((upper - lower) / 2 * 1000) / 1000 : -1}}},
          {"incomplete_phases", incomplete_phases},
          {"targets", std::move(targets)},
          {"checks", std::move(checks)}};
}

}  // namespace tether::bench
