// The request actor owns the whole-request deadline, the retry/fallback chain and the question
// "has the caller got a byte yet?". It never touches a socket.
//
//   start ──▶ attempting ◀──────────── backing_off
//     │         │   │  └─ retryable failure ──▶ ┘   (policy: retry_policy)
//     │         │   └─ committed stream ──▶ streaming ──▶ answered
//     │         └─ response / final failure ───────────▶ answered
//     └─ budget already spent (0) ─────────────────────▶ answered
//   any state: deadline | client gone | drain ──▶ cancel the attempt tree ──▶ answered
//   (a passed deadline is answered by the caller's io thread, which claims the answer from
//   this actor through the cancel_hub; this actor then records it and takes the tree down)
//   answered ──(every upstream connection actor down)──▶ access log, quit
//
// It lives until its last connection actor has exited, so the log can say when the upstream
// work really ended (work_ended_ms) and how long a cancel took to reach the socket.
#include "actors/request_actor.hpp"

#include <algorithm>
#include <atomic>

#include <boost/container/small_vector.hpp>

#include "actors/access_log.hpp"
#include "actors/actor_timers.hpp"
#include "actors/attempt_actor.hpp"
#include "actors/messages.hpp"
#include "actors/policy/deadline.hpp"
#include "actors/policy/model_request.hpp"
#include "actors/policy/retry_policy.hpp"
#include "actors/request_trace.hpp"
#include "actors/response_headers.hpp"
#include "net/notice_outbox.hpp"
#include "net/sse_framer.hpp"

namespace tether {
namespace {

using std::chrono::milliseconds;

enum class phase { attempting, backing_off, streaming, answered };

struct request_state;

// The request's helpers, shared by its handlers. Held once, in the state: a handler captures a
// pointer to them, where lambdas capturing the helpers they call (and those theirs) made a
// behavior of 1.57 KB per request (valgrind's DHAT), touched by every message and cold in the
// cache when 256 requests are in flight (bench scenario 1, c=256; bench/callgrind.sh CACHE_SIM).
struct request_ops {
  caf::event_based_actor* self = nullptr;
  request_state* st = nullptr;

  void maybe_quit();
  void mark_answered(outcome o, int status, std::int64_t at = now_ns());
  void record_attempt_end(outcome o, std::optional<int> status);
  void release_attempt();
  void cancel_attempt();
  void lost_to_deadline();
  void answer_error(outcome o, const std::string& message,
                    std::optional<milliseconds> retry_after = std::nullopt);
  void interrupt_stream(std::string_view type, const std::string& cause);
  void return_retry_token();
  void leave_upstreams();
  std::optional<milliseconds> caller_left() const;
  void start_attempt();
  void after_failure(const attempt_report& report, const std::string& message);
};

struct request_state : std::enable_shared_from_this<request_state> {
  runtime_ptr rt;
  std::shared_ptr<net::response_channel> channel;
  request_spec spec;
  request_deadline deadline{std::chrono::steady_clock::time_point{}, std::nullopt};
  std::int64_t arrival_ns = 0;
  std::int64_t arrival_wall_ns = 0;  // queue priority: comparable across cluster nodes

  const std::vector<std::string>* chain = nullptr;  // requested model, then its fallbacks
  std::size_t chain_pos = 0;
  std::uint32_t model_attempts = 0;
  // Inline room for a request's usual attempts (one, a retry or two): no allocation per request.
  boost::container::small_vector<std::size_t, 4> tried;
  retry_policy::history history;

  phase now = phase::attempting;
  caf::actor attempt;
  std::size_t attempt_deployment = 0;
  std::uint64_t backoff_generation = 0;
  // The retry budget's token this request holds (its upstream), from the retry decision through
  // the backoff and the retry attempt; and the upstreams it counts among their requests.
  std::optional<std::size_t> retry_token;
  boost::container::small_vector<std::size_t, 2> joined_upstreams;

  boost::container::small_vector<caf::actor_addr, 2> live_attempts;
  // Connection actors started by this request's attempts (counted by them before each spawn) and
  // those whose work_ended came: the request outlives every connection.
  std::atomic<std::uint32_t> connections_started{0};
  std::uint32_t connections_ended = 0;
  std::optional<std::int64_t> cancel_decided_ns;
  std::optional<std::int64_t> answered_ns;
  std::optional<std::int64_t> caller_left_ns;
  std::optional<std::int64_t> first_byte_ns;
  std::optional<std::int64_t> last_work_end_ns;
  std::optional<double> cancel_latency_ms;
  std::int64_t queue_wait_ns = 0;

  outcome result = outcome::internal_error;
  int status = 0;
  boost::container::small_vector<attempt_record, 2> attempts;
  // Per attempt: its upstream, and whether its connection held a budget slot (work_ended says).
  // An attempt that never got a slot never reached the upstream: it is left out of the access
  // line and the attempt counters, and its wait is queue wait.
  struct attempt_slot {
    std::size_t upstream = 0;
    bool held_slot = false;
  };
  boost::container::small_vector<attempt_slot, 2> attempt_work;
  std::unique_ptr<request_trace> trace;
  // Its pending timers are cancelled when the state goes with the actor's behavior (CAF clears
  // the behavior as the actor ends, before its attachables run): held here rather than shared
  // with an attach_functor, which cost two allocations and the actor's mutex per request.
  std::optional<actor_timers> timers;
  request_ops ops;

  double ms_since_arrival(std::int64_t ns) const {
    return static_cast<double>(ns - arrival_ns) / 1e6;
  }
};

// Upstream response headers worth passing to the caller, kept in the upstream's list (its
// strings move, none is copied).
net::header_list pass_headers(net::header_list&& upstream, const std::string& request_id) {
  std::erase_if(upstream, [](const net::http_header& h) {
    return !(h.name == "content-type" || h.name == "retry-after" ||
             h.name.starts_with("x-ratelimit-") || h.name.starts_with("openai-"));
  });
  upstream.push_back({"x-request-id", request_id});
  return std::move(upstream);
}

// ---- ending -------------------------------------------------------------------------------

void request_ops::maybe_quit() {
  if (st->now != phase::answered || !st->live_attempts.empty() ||
      st->connections_started.load() != st->connections_ended)
    return;
  const std::int64_t end_ns = now_ns();
  // Counted once every connection has said whether it held a slot, before the line is written:
  // whoever has seen the line sees it in /metrics too.
  std::size_t kept = 0;
  for (std::size_t i = 0; i < st->attempts.size(); ++i) {
    if (!st->attempt_work[i].held_slot) continue;
    st->rt->stats->attempt_done(st->attempt_work[i].upstream, st->attempts[i].result);
    if (kept != i) st->attempts[kept] = std::move(st->attempts[i]);
    ++kept;
  }
  st->attempts.resize(kept);
  access_record r;
  r.request_id = st->spec.request_id;
  r.model = st->spec.model;
  r.path = st->spec.path;
  r.stream = st->spec.stream;
  r.result = st->result;
  r.status = st->status;
  if (st->spec.deadline) r.deadline_ms = static_cast<double>(st->spec.deadline->count());
  r.queue_wait_ms = static_cast<double>(st->queue_wait_ns) / 1e6;
  if (st->first_byte_ns) r.ttfb_ms = st->ms_since_arrival(*st->first_byte_ns);
  r.duration_ms = st->ms_since_arrival(st->answered_ns.value_or(end_ns));
  if (st->caller_left_ns) r.caller_left_ms = st->ms_since_arrival(*st->caller_left_ns);
  if (st->last_work_end_ns) r.work_ended_ms = st->ms_since_arrival(*st->last_work_end_ns);
  r.cancel_latency_ms = st->cancel_latency_ms;
  r.client_retry = st->spec.client_retry;
  r.attempts = {st->attempts.data(), st->attempts.size()};
  // Counted before the line is written: whoever has seen the line sees it in /metrics too.
  st->rt->stats->request_done(st->spec.model, st->result, r.duration_ms / 1000.0);
  write_access_log(r);
  // A 499 is logged, never sent.
  std::optional<int> sent;
  if (st->result != outcome::client_disconnected) sent = st->status;
  st->trace->finish("POST", st->spec.path, st->spec.model, st->spec.request_id, sent, st->result,
                    end_ns);
  self->quit();
}

// The caller's side is over (answered, or gone): from here on, upstream work is late work.
void request_ops::mark_answered(outcome o, int status, std::int64_t at) {
  return_retry_token();
  leave_upstreams();
  st->result = o;
  st->status = status;
  st->now = phase::answered;
  st->answered_ns = at;
  st->rt->stats->requests_in_flight_add(-1);
}

void request_ops::record_attempt_end(outcome o, std::optional<int> status) {
  if (st->attempts.empty() || st->attempts.back().end_ms) return;
  auto& a = st->attempts.back();
  a.result = o;
  a.status = status;
  auto at = now_ns();
  a.end_ms = st->ms_since_arrival(at);
  st->trace->end_attempt(status, o, at);
}

void request_ops::return_retry_token() {
  if (!st->retry_token) return;
  st->rt->retries->retry_ended(*st->retry_token);
  st->retry_token.reset();
}

void request_ops::leave_upstreams() {
  for (auto up : st->joined_upstreams) st->rt->retries->request_left(up);
  st->joined_upstreams.clear();
}

// What is left of the deadline the caller declared itself; nullopt when it declared none.
std::optional<milliseconds> request_ops::caller_left() const {
  if (!st->spec.caller_deadline) return std::nullopt;
  auto spent =
      std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - st->spec.arrival);
  return std::max(milliseconds{0}, *st->spec.caller_deadline - spent);
}

// The current attempt has said its last word: its deployment is free for the router's count,
// and a next attempt may start while this one's actor is still on its way out. A retry it was
// ends with it.
void request_ops::release_attempt() {
  return_retry_token();
  if (!st->attempt) return;
  st->rt->routes->attempt_ended(st->attempt_deployment);
  st->attempt = nullptr;
}

// Stops the in-flight attempt's tree; its connection actor closes the socket and exits.
void request_ops::cancel_attempt() {
  if (!st->cancel_decided_ns) st->cancel_decided_ns = now_ns();
  if (st->attempt) {
    st->trace->event("cancel_sent", now_ns());
    self->send_exit(st->attempt, caf::exit_reason::user_shutdown);
  }
  release_attempt();
  ++st->backoff_generation;  // a pending backoff timer is void
}

// A claim to the answer lost (cancel_hub.hpp): the io thread has already answered the caller
// with the deadline's 504. Its deadline message follows with the exact moment.
void request_ops::lost_to_deadline() {
  cancel_attempt();
  record_attempt_end(outcome::deadline_exceeded, std::nullopt);
  if (!st->first_byte_ns) st->first_byte_ns = now_ns();
  mark_answered(outcome::deadline_exceeded, status_of(outcome::deadline_exceeded));
}

void request_ops::answer_error(outcome o, const std::string& message,
                               std::optional<milliseconds> retry_after) {
  if (!st->spec.hub->claim_answer()) return lost_to_deadline();
  int status = status_of(o);
  net::header_list headers{{"content-type", "application/json"},
                           {"x-request-id", st->spec.request_id}};
  if (retry_after) {
    headers.push_back({"retry-after", std::to_string((retry_after->count() + 999) / 1000)});
  } else if (o == outcome::overloaded || o == outcome::shutting_down) {
    headers.push_back({"retry-after", "1"});
  }
  add_outcome_headers(headers, status, o, retry_after, caller_left());
  st->channel->send_full(status, std::move(headers), error_body(o, message, st->spec.request_id));
  if (!st->first_byte_ns) st->first_byte_ns = now_ns();
  mark_answered(o, status);
}

// Mid-stream: cut between whole events, then one error event and the end of the stream.
void request_ops::interrupt_stream(std::string_view type, const std::string& cause) {
  auto err = error_body(outcome::stream_interrupted, type, cause, st->spec.request_id);
  st->channel->send_chunk(net::make_error_event(err));
  st->channel->end_stream();
  mark_answered(outcome::stream_interrupted, 200);
}

// ---- starting attempts --------------------------------------------------------------------

void request_ops::start_attempt() {
  const auto now = std::chrono::steady_clock::now();
  const std::int64_t started_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  if (st->deadline.expired(now)) {
    answer_error(outcome::deadline_exceeded, "the request deadline passed before an attempt");
    return;
  }
  if (st->chain_pos >= st->chain->size()) {  // the gateway only spawns known models
    answer_error(outcome::internal_error, "no deployment for a configured model");
    return;
  }
  const auto& model = (*st->chain)[st->chain_pos];
  auto dep_index = st->rt->routes->choose(model, {st->tried.data(), st->tried.size()});
  if (!dep_index) {
    answer_error(outcome::internal_error, "no deployment for a configured model");
    return;
  }
  const auto& dep = st->rt->routes->at(*dep_index);
  const auto& up = st->rt->cfg.upstreams[dep.upstream];
  auto settings = st->rt->cfg.effective_request(model);

  attempt_spec a;
  a.stream = st->spec.stream;
  a.timeout = st->deadline.attempt_timer(settings.attempt_timeout, now);
  a.idle_timeout = settings.stream_idle_timeout;
  a.connection.upstream = dep.upstream;
  a.connection.key = st->spec.key;
  a.connection.priority = st->arrival_wall_ns;
  a.connection.hub = st->spec.hub;
  a.connection.max_response_bytes = settings.max_response_bytes;
  a.connection.stream = st->spec.stream;
  a.connection.affinity = st->channel->affinity();
  a.connection.attempt_index = static_cast<std::uint32_t>(st->attempts.size());
  // Shares the state's lifetime (aliasing): no allocation.
  a.connections =
      std::shared_ptr<std::atomic<std::uint32_t>>(st->shared_from_this(), &st->connections_started);
  auto& req = a.connection.request;
  req.method = "POST";
  req.target = up.url.path_prefix + st->spec.path;
  // The caller's bytes as they are when the deployment serves the model under the same name.
  req.body = dep.upstream_model == st->spec.model
                 ? st->spec.body
                 : rewrite_model(st->spec.body, dep.upstream_model);
  req.headers.reserve(6);  // the most pushed below: one allocation instead of four
  req.headers.push_back({"content-type", "application/json"});
  if (st->spec.stream) req.headers.push_back({"accept", "text/event-stream"});
  if (!up.api_key.empty()) req.headers.push_back({"authorization", "Bearer " + up.api_key});
  req.headers.push_back({"x-request-id", st->spec.request_id});
  if (auto left = st->deadline.remaining(now)) {
    // A chained gateway inherits what is left of this request's budget.
    req.headers.push_back({"x-request-deadline-ms", std::to_string(left->count())});
  }
  std::string url;  // a span attribute: built only when spans are exported
  if (st->rt->tracer)
    url = std::string{up.url.tls ? "https://" : "http://"} + up.url.host + ":" +
          std::to_string(up.url.port) + req.target;
  req.headers.push_back({"traceparent", st->trace->begin_attempt(
                                            static_cast<std::uint32_t>(st->attempts.size()),
                                            up.name, up.url.host, up.url.port, url, started_ns)});

  if (std::find(st->joined_upstreams.begin(), st->joined_upstreams.end(), dep.upstream) ==
      st->joined_upstreams.end()) {
    st->rt->retries->request_joined(dep.upstream);
    st->joined_upstreams.push_back(dep.upstream);
  }
  st->tried.push_back(*dep_index);
  st->attempt_deployment = *dep_index;
  st->rt->routes->attempt_started(*dep_index);
  st->attempt = self->spawn<caf::linked>(attempt_actor, st->rt, caf::actor_cast<caf::actor>(self),
                                         std::move(a));
  self->monitor(st->attempt);
  st->live_attempts.push_back(st->attempt.address());
  st->now = phase::attempting;
  attempt_record rec;
  rec.upstream = up.name;
  rec.model = dep.upstream_model;
  rec.start_ms = st->ms_since_arrival(started_ns);
  st->attempts.push_back(std::move(rec));
  st->attempt_work.push_back({dep.upstream, false});
}

// After an attempt failed before committing: ask the policy.
void request_ops::after_failure(const attempt_report& report, const std::string& message) {
  st->history.record(report);
  auto settings = st->rt->cfg.effective_request((*st->chain)[st->chain_pos]);
  retry_policy policy{settings.max_retries, settings.retry_backoff};
  bool has_fallback = st->chain_pos + 1 < st->chain->size();
  const auto remaining = st->deadline.remaining(std::chrono::steady_clock::now());
  auto d = policy.decide(report, st->model_attempts, remaining, has_fallback);
  ++st->model_attempts;
  using act = retry_decision::action;
  if (d.what == act::retry && !st->attempt_work.empty()) {
    // The upstream that failed is the one a retry would add load to: its budget decides. Over
    // it, this model's attempts are spent (the fallback chain still applies).
    const auto up = st->attempt_work.back().upstream;
    const bool started = st->rt->retries->try_start_retry(up);
    st->rt->stats->retry_decided(up, started);
    if (started) {
      st->retry_token = up;
    } else {
      d = policy.decide(report, settings.max_retries, remaining, has_fallback);
    }
  }
  switch (d.what) {
    case act::retry:
      st->now = phase::backing_off;
      if (d.delay.count() <= 0) {
        start_attempt();
      } else {
        st->timers->after(d.delay, backoff_atom::value, ++st->backoff_generation);
      }
      return;
    case act::fallback:
      ++st->chain_pos;
      st->model_attempts = 0;
      st->tried.clear();
      start_attempt();
      return;
    case act::fail:
    case act::pass_through: {
      auto o = d.result;
      if (o == outcome::upstream_failed) o = st->history.exhausted_outcome();
      std::string why = o == outcome::upstream_timeout ? "every upstream attempt timed out"
                        : o == outcome::upstream_rate_limited
                            ? "the upstream is rate limiting (429)"
                        : o == outcome::overloaded ? "gateway overloaded: " + message
                                                   : "upstream failed: " + message;
      answer_error(o, why, d.retry_after);
      return;
    }
  }
}

}  // namespace

caf::behavior request_actor(caf::event_based_actor* self, runtime_ptr runtime,
                            std::shared_ptr<net::response_channel> channel, request_spec spec) {
  // The state is owned by the behavior returned below and by the down handler (CAF clears both
  // when the actor ends, and no handler runs after that); the other handlers hold plain pointers
  // to it, to its helpers and to the runtime, which outlives every actor. Shared pointers there
  // cost ≈100 atomic reference-count updates per request, ≈7% of tether's CPU under load (perf).
  auto owner = std::make_shared<request_state>();
  request_state* st = owner.get();
  st->rt = std::move(runtime);
  gateway_runtime* rt = st->rt.get();
  st->channel = std::move(channel);
  st->spec = std::move(spec);
  if (!st->spec.hub) st->spec.hub = std::make_shared<cancel_hub>();
  st->deadline = request_deadline{st->spec.arrival, st->spec.deadline};
  st->arrival_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(st->spec.arrival.time_since_epoch())
          .count();
  st->arrival_wall_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count() -
                        (now_ns() - st->arrival_ns);
  st->chain = &rt->routes->chain_of(st->spec.model);
  st->timers.emplace(rt->timers.get(), self->address());
  st->trace = std::make_unique<request_trace>(
      rt->tracer.get(), st->spec.traceparent.empty() ? nullptr : &st->spec.traceparent,
      st->arrival_ns);
  rt->stats->requests_in_flight_add(1);
  st->ops = {self, st};
  request_ops* ops = &st->ops;

  // ---- events -------------------------------------------------------------------------------

  // Links carry cancellation down the tree; ends are learnt from monitors (one down_msg each).
  // Not from the links' exit_msg: CAF unlinks on every exit_msg it delivers, so cancelling an
  // attempt (send_exit) dissolves the link and its end would never be reported here (tried: the
  // deadline's requests then never ended).
  self->set_exit_handler([](caf::exit_msg&) {});

  self->set_down_handler([st, ops, owner](caf::down_msg& msg) {
    if (auto live = std::find(st->live_attempts.begin(), st->live_attempts.end(), msg.source);
        live != st->live_attempts.end()) {
      st->live_attempts.erase(live);
      // An attempt that is still current never reported: it crashed. A failed attempt.
      // An earlier attempt's down_msg can arrive after its successor started (a retry
      // without backoff): that one is not the current attempt and must not release it.
      bool unreported = st->attempt && msg.source == st->attempt.address();
      if (unreported) ops->release_attempt();
      if (unreported && st->now == phase::attempting) {
        ops->record_attempt_end(outcome::internal_error, std::nullopt);
        attempt_report r;
        r.end = attempt_end::reset;
        ops->after_failure(r, "attempt ended unexpectedly");
      }
    }
    ops->maybe_quit();
  });

  // Before anything: a spent budget reaches no upstream.
  if (st->spec.deadline && st->spec.deadline->count() == 0) {
    ops->answer_error(outcome::deadline_exceeded, "the caller's deadline budget is already spent");
  } else {
    if (st->spec.deadline) {
      // Answered on an io thread, not here (cancel_hub.hpp): at the deadline that thread claims
      // the answer, writes the 504 and closes the upstream sockets, then tells this actor, which
      // records the outcome and takes its tree down. A stream already begun is this actor's to
      // interrupt; the io thread then only closes the upstream sockets. The timer runs on the
      // caller's connection, so the 504 is written from the callback itself.
      // Once the 504 is written the telling can wait until the io thread has caught up
      // (net/notice_outbox.hpp): at a storm of expiries the tree's teardown then no longer takes
      // turns on the CPU with the 504s still to be written. An interruption still to be sent
      // cannot wait. The upstream sockets of an answered request are closed behind the other
      // expiries of the same round, whose callers are still waiting: bench deadline storm, 13
      // interleaved storm-only runs a side, answer p99 ≤ 5 ms in 11 (2.4–3.8 ms) against 4, and
      // no upstream connection > 5 ms past its deadline in 10 against 4 (close p99 4.0–5.0 ms).
      std::weak_ptr<cancel_hub> weak_hub = st->spec.hub;
      std::weak_ptr<net::response_channel> weak_channel = st->channel;
      st->timers->track(st->channel->run_at(*st->deadline.due(), [weak_hub, weak_channel,
                                                                  owner = self->address(),
                                                                  id = st->spec.request_id] {
        auto hub = weak_hub.lock();
        if (!hub) return;
        const auto at = now_ns();
        bool answered = false;
        if (hub->claim_answer()) {
          if (auto channel = weak_channel.lock()) {
            net::header_list headers{{"content-type", "application/json"}, {"x-request-id", id}};
            add_outcome_headers(headers, status_of(outcome::deadline_exceeded),
                                outcome::deadline_exceeded);
            channel->send_full(
                status_of(outcome::deadline_exceeded), std::move(headers),
                error_body(outcome::deadline_exceeded, "the request deadline passed", id));
            answered = true;
          }
        }
        if (answered) {
          net::defer_behind_queued([hub] { hub->cancel_all(); });
        } else {
          hub->cancel_all();  // a stream already begun: its upstream goes at once
        }
        net::post_notice(
            [owner, answered, at] {
              if (auto a = caf::actor_cast<caf::actor>(owner))
                caf::anon_send(a, deadline_atom::value, answered, at);
            },
            answered ? net::notice_timing::when_caught_up : net::notice_timing::now_unless_holding);
      }));
    }
    ops->start_attempt();
  }
  // Cannot quit from inside the constructor-like init; do it on the first message instead.
  if (st->now == phase::answered) self->send(self, safety_atom::value);

  return {
      [st, ops](att_result_atom, int status, net::header_list& headers, std::string& body) {
        if (st->now == phase::answered) return;
        ops->release_attempt();
        attempt_report report;
        report.end = attempt_end::response;
        report.status = status;
        report.retry_after = parse_retry_after(net::find_header(headers, "retry-after"));
        bool success = status >= 200 && status < 300;
        bool rejected = status >= 400 && status < 500 && status != 429;
        if (success || rejected) {
          if (!st->spec.hub->claim_answer()) {
            ops->lost_to_deadline();
            ops->maybe_quit();
            return;
          }
          auto o = success ? outcome::ok : outcome::upstream_rejected;
          ops->record_attempt_end(o, status);
          auto out = pass_headers(std::move(headers), st->spec.request_id);
          add_outcome_headers(out, status, o, std::nullopt, ops->caller_left());
          st->channel->send_full(status, std::move(out), std::move(body));
          st->first_byte_ns = now_ns();
          ops->mark_answered(o, status, *st->first_byte_ns);
          ops->maybe_quit();
          return;
        }
        ops->record_attempt_end(
            status == 429 ? outcome::upstream_rate_limited : outcome::upstream_failed, status);
        ops->after_failure(report, "status " + std::to_string(status));
        ops->maybe_quit();
      },
      [st, ops](att_head_atom, int status, net::header_list& headers) {
        if (st->now == phase::answered) return;
        if (!st->spec.hub->claim_answer()) {
          ops->lost_to_deadline();
          ops->maybe_quit();
          return;
        }
        auto out = pass_headers(std::move(headers), st->spec.request_id);
        out.push_back({"cache-control", "no-cache"});
        add_outcome_headers(out, status, outcome::ok);
        st->channel->start_stream(status, std::move(out));
        st->first_byte_ns = now_ns();
        st->now = phase::streaming;
        st->status = status;
      },
      [st](att_event_atom, std::string& event) {
        if (st->now != phase::streaming) return;
        st->channel->send_chunk(std::move(event));
      },
      [st, ops](att_end_atom) {
        if (st->now != phase::streaming) return;
        ops->release_attempt();
        st->channel->end_stream();
        ops->record_attempt_end(outcome::ok, st->status);
        ops->mark_answered(outcome::ok, st->status);
        ops->maybe_quit();
      },
      [st, ops](att_fail_atom, std::int32_t kind, std::string& message, bool committed) {
        if (st->now == phase::answered) return;
        ops->release_attempt();
        auto end = static_cast<attempt_end>(kind);
        if (committed || st->now == phase::streaming) {
          ops->record_attempt_end(outcome::stream_interrupted, st->status);
          if (end == attempt_end::timeout) {
            ops->interrupt_stream("timeout_error", "stream interrupted: " + message);
          } else {
            ops->interrupt_stream("upstream_error",
                                  "stream interrupted: upstream ended (" + message + ")");
          }
          ops->maybe_quit();
          return;
        }
        outcome o = end == attempt_end::timeout      ? outcome::upstream_timeout
                    : end == attempt_end::overloaded ? outcome::overloaded
                                                     : outcome::upstream_failed;
        ops->record_attempt_end(o, std::nullopt);
        attempt_report report;
        report.end = end;
        ops->after_failure(report, message);
        ops->maybe_quit();
      },
      [st, ops](backoff_atom, std::uint64_t generation) {
        if (generation != st->backoff_generation || st->now != phase::backing_off) return;
        ops->start_attempt();
        ops->maybe_quit();
      },
      [st, ops](deadline_atom, bool answered_there, std::int64_t at_ns) {
        if (answered_there) {
          // The io thread answered at at_ns and closed the upstream sockets then: that moment is
          // the answer and the cancel decision.
          st->first_byte_ns = at_ns;
          st->cancel_decided_ns = std::min(st->cancel_decided_ns.value_or(at_ns), at_ns);
          if (st->now == phase::answered) {  // this actor lost a claim before this came
            st->answered_ns = at_ns;
            st->trace->event("deadline_exceeded", at_ns);
            ops->maybe_quit();
            return;
          }
        }
        if (st->now == phase::answered) return;
        st->trace->event("deadline_exceeded", at_ns);
        ops->cancel_attempt();
        ops->record_attempt_end(outcome::deadline_exceeded, std::nullopt);
        if (answered_there) {
          ops->mark_answered(outcome::deadline_exceeded, status_of(outcome::deadline_exceeded));
          st->answered_ns = at_ns;
        } else if (st->now == phase::streaming) {
          ops->interrupt_stream("timeout_error", "stream interrupted: the request deadline passed");
        } else {
          ops->answer_error(outcome::deadline_exceeded, "the request deadline passed");
        }
        ops->maybe_quit();
      },
      [st, ops](client_gone_atom, std::int64_t left_ns) {
        if (st->now == phase::answered) return;
        st->spec.hub->claim_answer();  // a deadline passing now has nobody to answer
        // The io thread that saw the caller leave has already cancelled the upstream exchanges
        // (cancel_hub): that moment is the cancel decision.
        st->caller_left_ns = left_ns;
        if (!st->cancel_decided_ns) st->cancel_decided_ns = left_ns;
        st->trace->event("caller_left", *st->caller_left_ns);
        ops->cancel_attempt();
        ops->record_attempt_end(outcome::client_disconnected, std::nullopt);
        ops->mark_answered(outcome::client_disconnected, 499);
        ops->maybe_quit();
      },
      [st, ops](drain_cancel_atom) {
        if (st->now == phase::answered) return;
        ops->cancel_attempt();
        ops->record_attempt_end(outcome::shutting_down, std::nullopt);
        if (st->now == phase::streaming) {
          ops->interrupt_stream(error_type_of(outcome::shutting_down),
                                "stream interrupted: the gateway is shutting down");
        } else {
          ops->answer_error(outcome::shutting_down, "the gateway is shutting down");
        }
        ops->maybe_quit();
      },
      [st, rt, ops](work_ended_atom, std::uint64_t upstream, std::uint32_t attempt_index,
                    std::int64_t closed_ns, bool held_slot, std::int64_t queue_wait_ns) {
        ++st->connections_ended;
        if (attempt_index < st->attempt_work.size())
          st->attempt_work[attempt_index].held_slot = held_slot;
        st->queue_wait_ns += queue_wait_ns;
        st->last_work_end_ns = std::max(st->last_work_end_ns.value_or(0), closed_ns);
        st->trace->event("work_ended", closed_ns);
        if (held_slot && st->cancel_decided_ns && closed_ns >= *st->cancel_decided_ns) {
          double latency = static_cast<double>(closed_ns - *st->cancel_decided_ns) / 1e9;
          rt->stats->cancel_latency(latency);
          st->cancel_latency_ms = std::max(st->cancel_latency_ms.value_or(0), latency * 1e3);
        }
        if (held_slot && st->answered_ns && closed_ns > *st->answered_ns) {
          rt->stats->late_work(upstream, static_cast<double>(closed_ns - *st->answered_ns) / 1e9);
        }
        ops->maybe_quit();
      },
      [ops, owner](safety_atom) { ops->maybe_quit(); },
  };
}

}  // namespace tether
