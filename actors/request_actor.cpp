// The request actor: one caller's model request, from arrival to the end of its last upstream
// socket. What to do is decided by its request_lifecycle
// (actors/policy/request/request_lifecycle.hpp, where the states are drawn); this file turns
// messages into the lifecycle's events and carries out the commands it returns: it spawns and
// cancels attempts, arms the deadline and backoff timers, writes to the caller's channel, and logs.
// It never touches a socket.
//
// The tree: the gateway spawns this actor and the supervisor links to it; this actor spawns its
// attempts linked (each spawns its connection actor linked). Cancellation travels down as an
// exit whose reason says why (stop_reason: deadline, client gone, drain); ends travel up by the
// same links (an attempt's exit) and by each connection's work_ended report. It lives until every
// connection has reported, so the access line says when the upstream work really ended.
#include "actors/request_actor.hpp"

#include <algorithm>

#include <boost/container/small_vector.hpp>

#include "actors/access_log.hpp"
#include "actors/actor_timers.hpp"
#include "actors/attempt_actor.hpp"
#include "actors/budget_actor.hpp"
#include "actors/ledger_actor.hpp"
#include "actors/messages.hpp"
#include "actors/one_way.hpp"
#include "actors/policy/admission/queue_priority.hpp"
#include "actors/policy/admission/token_weight.hpp"
#include "actors/policy/ledger/model_price.hpp"
#include "actors/policy/ledger/waste.hpp"
#include "actors/policy/request/request_lifecycle.hpp"
#include "actors/policy/routing/response_affinity.hpp"
#include "actors/policy/wire/model_request.hpp"
#include "actors/policy/wire/output_event.hpp"
#include "actors/policy/wire/usage.hpp"
#include "actors/request_trace.hpp"
#include "actors/response_headers.hpp"
#include "actors/upstream_auth.hpp"
#include "net/sse_framer.hpp"

namespace tether {
namespace {

using std::chrono::milliseconds;
using command = lifecycle_command;

// The attempt's complete response, while the lifecycle decides whether it goes to the caller.
struct held_response {
  int status = 0;
  net::header_list* headers = nullptr;
  std::string* body = nullptr;
};

struct request_state {
  caf::event_based_actor* self = nullptr;
  runtime_ptr rt;
  std::shared_ptr<net::response_channel> channel;
  request_spec spec;
  std::optional<request_lifecycle> life;
  std::int64_t arrival_ns = 0;
  std::int64_t arrival_wall_ns = 0;  // for the queue's rank: comparable across cluster nodes

  // Strong handles: an actor nobody holds is collected at once.
  struct live_attempt {
    caf::actor actor;
    std::uint32_t index = 0;
  };
  boost::container::small_vector<live_attempt, 2> live;

  // For the access line and the trace.
  std::optional<std::int64_t> cancel_decided_ns;
  std::optional<std::int64_t> answered_ns;
  std::optional<std::int64_t> caller_left_ns;
  std::optional<std::int64_t> first_byte_ns;
  std::optional<std::int64_t> last_work_end_ns;
  // When the last connection's slot went back: the engine's work ended (a cut attempt's release
  // grace is over), for the ledger's waste.
  std::int64_t last_release_ns = 0;
  std::optional<double> cancel_latency_ms;
  std::int64_t queue_wait_ns = 0;
  boost::container::small_vector<attempt_record, 2> attempts;
  // Per attempt: its upstream, and whether its connection held a budget slot (work_ended says).
  // An attempt that never got a slot never reached the upstream: it is left out of the access
  // line and the attempt counters, and its wait is queue wait.
  struct attempt_slot {
    std::size_t upstream = 0;
    bool held_slot = false;
  };
  boost::container::small_vector<attempt_slot, 2> attempt_work;
  std::optional<request_trace> trace;  // inline: one allocation fewer per request
  // Pending timers are cancelled when the state goes, in the actor's on_exit.
  std::optional<actor_timers> timers;
  // Responses API: the id of the response relayed, once learned for previous_response_id
  // follow-ups (and named by the response.failed that ends a cut stream), and the events
  // relayed so far (the sequence numbers that event follows).
  bool response_id_learned = false;
  std::string response_id;
  std::uint64_t responses_events = 0;
  // The try's end is told to the call table once, before its answer leaves (a client retries the
  // moment it has the answer).
  bool call_noted = false;
  void note_call_end();
  void learn_response_id(std::optional<std::string> id);
  // What the upstream reported using, from the relayed body or the stream's events.
  std::optional<token_usage> usage;
  void note_usage(std::string_view text);
  void relay_events(net::sse_events& events);
  // The key's rate charge, once the budget admitted the request: the second it was made in.
  std::optional<std::int64_t> rate_charged_second;
  void ask_rate();
  void rate_answered(bool admitted, bool never, std::int64_t retry_after_ms,
                     std::optional<std::int64_t> charged_second, std::string reason);
  void correct_rate_charge();
  // The ledger (actors/ledger_actor.hpp): the estimate the key's budgets admitted the request
  // with, the output events relayed (the completion when the upstream reports none), and the
  // request's record, sent as it finishes.
  std::optional<ledger::period_usage> budget_admitted;
  std::uint64_t relayed_tokens = 0;
  void ask_admission();
  void ask_budget();
  void budget_answered(bool admitted, std::int64_t retry_after_s, const std::string& limit);
  void record_usage();
  const std::string* key_name() const {
    return spec.key >= 0 ? &rt->cfg.keys[static_cast<std::size_t>(spec.key)].name : nullptr;
  }

  // The clock the request's decisions read: the timers' own (the steady clock; a test's clock in
  // the actor tests), so a test drives a deadline, a backoff and a grant in one timeline.
  steady_time now() const {
    return steady_time{std::chrono::duration_cast<steady_time::duration>(rt->timers->now())};
  }

  double ms_since_arrival(std::int64_t ns) const {
    return static_cast<double>(ns - arrival_ns) / 1e6;
  }

  void begin(caf::event_based_actor* actor, runtime_ptr runtime,
             std::shared_ptr<net::response_channel> caller, request_spec request);
  bool start();
  bool is_attempt(const caf::actor_addr& who) const;
  void attempt_exited(const caf::actor_addr& who);
  std::int64_t decided_at(stop_reason why, std::int64_t now) const;
  void caller_gone(std::int64_t left_ns);
  void work_ended(std::uint64_t upstream, std::uint32_t attempt_index, std::int64_t closed_ns,
                  bool held_slot, std::int64_t connection_queue_wait_ns, std::int64_t head_ns,
                  std::int64_t released_ns);

  // Carries out what the lifecycle said, in order.
  void run(const request_lifecycle::commands& commands, const held_response* held = nullptr);
  void execute(const command& c, const held_response* held);

  void start_attempt(const command& c);
  void cancel_attempt(const command& c);
  void send_response(const command& c, const held_response& held);
  void start_stream(const command& c, net::header_list& headers);
  void send_error(const command& c);
  void interrupt_stream(const command& c);
  void attempt_over(const command& c);
  void caller_side_over();
  void finish();
  std::optional<milliseconds> caller_left() const;
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

void request_state::run(const request_lifecycle::commands& commands, const held_response* held) {
  for (const auto& c : commands) execute(c, held);
}

void request_state::execute(const command& c, const held_response* held) {
  using kind = command::kind;
  switch (c.what) {
    case kind::arm_deadline:
      timers->after(c.at - now(), deadline_atom::value);
      return;
    case kind::check_admission:
      return ask_admission();
    case kind::start_attempt:
      return start_attempt(c);
    case kind::cancel_attempt:
      return cancel_attempt(c);
    case kind::arm_backoff:
      timers->after(c.delay, backoff_atom::value, c.generation);
      return;
    case kind::send_response:
      return send_response(c, *held);
    case kind::start_stream:
      return start_stream(c, *held->headers);
    case kind::end_stream:
      note_call_end();
      channel->end_stream();
      return;
    case kind::send_error:
      return send_error(c);
    case kind::interrupt_stream:
      return interrupt_stream(c);
    case kind::attempt_over:
      return attempt_over(c);
    case kind::retry_asked:
      rt->stats->retry_decided(c.upstream, c.granted);
      return;
    case kind::caller_side_over:
      return caller_side_over();
    case kind::finish:
      return finish();
  }
}

void request_state::start_attempt(const command& c) {
  const std::int64_t started_ns = now_ns();
  const auto& dep = rt->routes->at(c.deployment);
  const auto& up = rt->cfg.upstreams[dep.upstream];
  const auto& settings = life->settings();
  if (c.route != route_kind::none) rt->stats->route_decided(life->model(), c.route);

  // A caller who did not ask for a stream, on an upstream that streams always: the engine stops
  // a request's work only when it writes to a connection that has gone (docs/contract.md,
  // `upstream_stream`), so it is asked for a stream and the whole answer is assembled here.
  const bool assemble = !spec.stream && can_stream(spec.where) &&
                        up.upstream_stream == config::upstream_stream_mode::always;

  attempt_spec a;
  a.stream = spec.stream;
  a.where = spec.where;
  if (assemble) a.assemble = spec.where;
  a.timeout = c.delay;
  a.idle_timeout = settings.stream_idle_timeout;
  a.connection.upstream = dep.upstream;
  a.connection.key = spec.key;
  a.connection.rank = queue_rank(spec.queue_class, arrival_wall_ns);
  if (dep.token_cap > 0)
    a.connection.tokens =
        token_weight(spec.prompt_tokens, spec.max_output_tokens, dep.default_max_tokens);
  a.connection.max_response_bytes = settings.max_response_bytes;
  a.connection.stream = spec.stream || assemble;
  a.connection.affinity = channel->affinity();
  a.connection.budget = spec.budget;
  a.connection.attempt_index = c.attempt;
  auto& req = a.connection.request;
  req.method = "POST";
  req.target = up.url.path_prefix + spec.path;
  if (!spec.query.empty()) req.target += spec.query;
  // The caller's bytes as they are when the deployment serves the model under the same name.
  if (assemble) {
    // Chat and completions report usage in a stream only when asked; the whole answer has it.
    const bool with_usage = spec.where == surface::chat || spec.where == surface::completions;
    req.body = ask_for_stream(dep.upstream_model == spec.model
                                  ? std::string_view(spec.body)
                                  : std::string_view(rewrite_model(spec.body, dep.upstream_model)),
                              with_usage);
  } else if (spec.ask_usage && rt->ledger) {
    // The ledger's count is the upstream's own: asked for, it arrives in the stream's last chunk.
    req.body = ask_for_stream(dep.upstream_model == spec.model
                                  ? std::string_view(spec.body)
                                  : std::string_view(rewrite_model(spec.body, dep.upstream_model)),
                              true);
  } else if (dep.upstream_model == spec.model) {
    req.body = spec.body;  // shared, not copied
  } else {
    req.body = rewrite_model(spec.body, dep.upstream_model);
  }
  if (up.engine == config::engine_kind::sglang) {
    // SGLang keeps decoding a non-streaming request after its caller's connection closed, until
    // its own wait times out; tether aborts it by this rid when it cancels the attempt. One rid
    // per attempt: SGLang refuses a rid that is still live.
    a.connection.engine_rid = spec.request_id + "." + std::to_string(c.attempt);
    req.body = with_rid(req.body.view(), a.connection.engine_rid);
  }
  req.close_at = c.close_at;
  req.fresh_connection = c.fresh_connection;
  req.headers.reserve(8);  // the most pushed below: one allocation instead of four
  req.headers.push_back({"content-type", "application/json"});
  if (spec.stream || assemble) req.headers.push_back({"accept", "text/event-stream"});
  add_upstream_auth(req.headers, up, spec.anthropic_version, spec.anthropic_beta);
  req.headers.push_back({"x-request-id", spec.request_id});
  if (c.deadline_left) {
    // A chained gateway inherits what is left of this request's budget.
    req.headers.push_back({"x-request-deadline-ms", std::to_string(c.deadline_left->count())});
  }
  std::string url;  // a span attribute: built only when spans are exported
  if (rt->tracer)
    url = std::string{up.url.tls ? "https://" : "http://"} + up.url.host + ":" +
          std::to_string(up.url.port) + req.target;
  req.headers.push_back({"traceparent", trace->begin_attempt(c.attempt, up.name, up.url.host,
                                                             up.url.port, url, started_ns)});

  auto attempt = spawn_attempt(self, rt, std::move(a));
  live.push_back({std::move(attempt), c.attempt});
  attempt_record rec;
  rec.upstream = up.name;
  rec.model = dep.upstream_model;
  rec.start_ms = ms_since_arrival(started_ns);
  attempts.push_back(std::move(rec));
  attempt_work.push_back({dep.upstream, false});
}

// The attempt's tree goes down with the reason; its connection actor closes the socket and
// reports when it has.
void request_state::cancel_attempt(const command& c) {
  const auto at = now_ns();
  if (!cancel_decided_ns) cancel_decided_ns = decided_at(c.reason, at);
  auto it = std::find_if(live.begin(), live.end(),
                         [&](const live_attempt& a) { return a.index == c.attempt; });
  if (it == live.end()) return;
  trace->event("cancel_sent", at);
  // CAF removes the link when it delivers the exit: the stopped attempt's end comes as a
  // down_msg.
  self->monitor(it->actor);
  if (!c.behind_answers) {
    self->send_exit(it->actor, stop_error(c.reason));
    return;
  }
  // Enqueued as from outside the scheduler: the attempt's job goes to the back of the queue,
  // behind the other requests whose deadline passed in the same moment, instead of to its front
  // (where a message between actors goes), which would run this tree's whole teardown before the
  // next caller's 504.
  it->actor->enqueue(self->ctrl(), caf::make_message_id(),
                     caf::make_message(caf::exit_msg{self->address(), stop_error(c.reason)}),
                     nullptr);
}

void request_state::learn_response_id(std::optional<std::string> id) {
  if (!id) return;
  rt->affinity->learn(*id, life->current_upstream());
  response_id_learned = true;
  response_id = std::move(*id);
}

// The outcome is known (the lifecycle closed the caller's side) and not yet sent: an ok ends the
// call, anything else keeps it for call_window_ms.
void request_state::note_call_end() {
  if (!spec.call || call_noted) return;
  call_noted = true;
  const auto evicted = rt->calls->ended(*spec.call, life->result() == outcome::ok, spec.call_due,
                                        spec.call_try, now(), life->settings().call_window,
                                        life->upstream_attempts(), life->result());
  if (evicted > 0) rt->stats->call_evicted(evicted);
}

void request_state::send_response(const command& c, const held_response& held) {
  note_call_end();
  if (spec.where == surface::responses && c.status >= 200 && c.status < 300)
    learn_response_id(response_id_of(*held.body));
  if (c.status >= 200 && c.status < 300) note_usage(*held.body);
  auto out = pass_headers(std::move(*held.headers), spec.request_id);
  add_outcome_headers(out, c.status, c.result, std::nullopt, caller_left());
  channel->send_full(c.status, std::move(out), std::move(*held.body));
  first_byte_ns = now_ns();
}

void request_state::start_stream(const command& c, net::header_list& headers) {
  auto out = pass_headers(std::move(headers), spec.request_id);
  out.push_back({"cache-control", "no-cache"});
  add_outcome_headers(out, c.status, outcome::ok);
  channel->start_stream(c.status, std::move(out));
  first_byte_ns = now_ns();
}

void request_state::send_error(const command& c) {
  note_call_end();
  auto headers = error_headers(spec.request_id, c.status, c.result, c.retry_after, caller_left());
  if (life->call_out_of_attempts()) {
    // The same answer as the last try's, but no retry is worth making: the call's attempts are
    // spent whatever the outcome would advise.
    for (auto& h : headers)
      if (h.name == "x-should-retry") h.value = "false";
  }
  channel->send_full(c.status, std::move(headers),
                     error_body_on(spec.where, c.status, c.result, c.message, spec.request_id));
  if (!first_byte_ns) first_byte_ns = now_ns();
}

// Mid-stream: cut between whole events, then one error event and the end of the stream.
// On /v1/responses the Responses API's own response.failed follows it, as the stream's last event.
void request_state::interrupt_stream(const command& c) {
  note_call_end();
  auto e = stream_error_of(spec.where, c.type, c.message, spec.request_id);
  auto chunk = net::make_error_event(e.data, e.event);
  if (spec.where == surface::responses) {
    const auto created =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::nanoseconds(arrival_wall_ns))
            .count();
    auto failed = responses_failed_of(response_id.empty() ? spec.request_id : response_id, created,
                                      spec.model, responses_events + 1, c.message);
    chunk += net::make_error_event(failed.data, failed.event);
  }
  channel->send_chunk(std::move(chunk));
  channel->end_stream();
}

// The current attempt's record ends (once: an attempt already over keeps its first outcome).
void request_state::attempt_over(const command& c) {
  if (attempts.empty() || attempts.back().end_ms) return;
  auto& a = attempts.back();
  a.result = c.result;
  a.stale_connection = c.stale_connection;
  if (c.status > 0) a.status = c.status;
  const auto at = now_ns();
  a.end_ms = ms_since_arrival(at);
  trace->end_attempt(a.status, c.result, at);
}

void request_state::caller_side_over() {
  note_call_end();  // the caller left: nothing was sent
  answered_ns = now_ns();
  rt->stats->requests_in_flight_add(-1);
}

void request_state::note_usage(std::string_view text) {
  if (auto u = usage_of(text)) {
    if (!usage) usage.emplace();
    merge_usage(*usage, *u);
  }
}

// The events of one upstream read go to the caller as one chunk, so as one write: a stream that
// fell behind catches up with fewer writes than events.
void request_state::relay_events(net::sse_events& events) {
  if (!life->relays_events() || events.empty()) return;
  if (spec.where == surface::responses) responses_events += events.size();
  // The usage chunk asked for on the caller's behalf is read and kept from it (rare: one per
  // stream, so the copy of the others is made only then).
  std::optional<std::string> kept;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto event = events[i];
    // The stream's first events carry the response object and its id.
    if (spec.where == surface::responses && !response_id_learned)
      learn_response_id(response_id_of_event(event));
    note_usage(event);  // one scan for "usage", none more without it
    if (!rt->ledger) continue;
    if (carries_output(spec.where, event)) ++relayed_tokens;
    if (spec.ask_usage && is_usage_chunk(event)) {
      if (!kept)
        kept.emplace(std::string_view(events.text).substr(0, event.data() - events.text.data()));
      continue;
    }
    if (kept) kept->append(event);
  }
  if (kept) {
    if (kept->empty()) return;
    events.text = std::move(*kept);
  }
  channel->send_chunk(std::move(events.text));
}

// The key's rates first (the budget host's), then its budgets (the ledger's).
void request_state::ask_admission() {
  if (spec.check_rate) {
    ask_rate();
  } else {
    ask_budget();
  }
}

// Bounded like the rates: a ledger that does not answer (its file stuck) must not hold the
// request; without a verdict it is admitted, as a budget bounds spend, not service.
void request_state::ask_budget() {
  if (!rt->ledger) {
    run(life->on_admission(true, outcome::ok, {}, std::nullopt, now()));
    return;
  }
  self->request(rt->ledger, std::chrono::seconds(5), ledger_admit_atom::value, *key_name(),
                ledger::limits_of(rt->cfg.keys[static_cast<std::size_t>(spec.key)]),
                spec.budget_estimate)
      .then([this](bool admitted, std::int64_t retry_after_s, std::string& limit,
                   bool) { budget_answered(admitted, retry_after_s, limit); },
            [this](caf::error&) { budget_answered(true, 0, {}); });
}

void request_state::budget_answered(bool admitted, std::int64_t retry_after_s,
                                    const std::string& limit) {
  // Counted in flight even when the caller is gone meanwhile: the record at the end takes it out.
  if (admitted) budget_admitted = spec.budget_estimate;
  if (!life->admitting()) return;
  if (admitted) {
    run(life->on_admission(true, outcome::ok, {}, std::nullopt, now()));
    return;
  }
  run(life->on_admission(false, outcome::budget_exhausted,
                         "the key's " + limit + " is used up until its period ends",
                         milliseconds(retry_after_s * 1000), now()));
}

// Bounded: a budget host that never answers (lost with the message) must not hold the request;
// the deadline, when there is one, ends the wait sooner.
void request_state::ask_rate() {
  self->request(rt->budget, std::chrono::seconds(5), rate_atom::value, spec.key, spec.rate_tokens)
      .then(
          [this](bool admitted, bool never, std::int64_t retry_after_ms,
                 std::int64_t charged_second, std::string& reason) {
            rate_answered(admitted, never, retry_after_ms, charged_second, std::move(reason));
          },
          // No verdict (the host was lost meanwhile): admitted uncounted, as the caps of a node
          // cut off from its host are its own.
          [this](caf::error&) { rate_answered(true, false, 0, std::nullopt, {}); });
}

void request_state::rate_answered(bool admitted, bool never, std::int64_t retry_after_ms,
                                  std::optional<std::int64_t> charged_second, std::string reason) {
  // Charged even when the caller is gone meanwhile: the request was made, and its correction
  // (to nothing used) comes at the end.
  if (admitted) rate_charged_second = charged_second;
  if (!life->admitting()) return;
  if (admitted && spec.check_budget) {
    ask_budget();
    return;
  }
  if (!admitted && !never) {
    rt->stats->rate_limited(*key_name());
  }
  const auto why = never ? outcome::bad_request : outcome::rate_limited;
  std::optional<milliseconds> retry_after;
  if (!admitted && !never) retry_after = milliseconds(retry_after_ms);
  run(life->on_admission(admitted, why, std::move(reason), retry_after, now()));
}

// The estimate charged at admission becomes what the upstream reported using; a request that
// never reached an upstream used nothing; without a report the estimate stands.
void request_state::correct_rate_charge() {
  if (!rate_charged_second) return;
  std::optional<std::uint64_t> actual;
  if (usage) {
    actual = usage->prompt.value_or(0) + usage->completion.value_or(0);
  } else if (std::none_of(attempt_work.begin(), attempt_work.end(),
                          [](const attempt_slot& a) { return a.held_slot; })) {
    actual = 0;
  }
  if (!actual || *actual == spec.rate_tokens) return;
  self->send(rt->budget, rate_fix_atom::value, spec.key, *rate_charged_second, spec.rate_tokens,
             *actual);
}

// The request's record for the ledger and the token metrics: what the upstream reported, or,
// without a report from an upstream that worked on it, the estimate of the prompt and the output
// relayed; a request no upstream worked on used nothing and leaves no record. Sent one-way: the
// ledger aggregates it and writes it later, off this path.
void request_state::record_usage() {
  const bool worked = std::any_of(attempt_work.begin(), attempt_work.end(),
                                  [](const attempt_slot& a) { return a.held_slot; });
  if (!worked && !usage) {
    if (rt->ledger && budget_admitted) {
      ledger::ledger_entry none;
      if (const auto* name = key_name()) none.key = *name;
      none.admitted = *budget_admitted;
      none.worked = false;
      self->send(rt->ledger, ledger_record_atom::value, std::move(none));
    }
    return;
  }
  // Without the ledger the metrics count what the upstream reported, as before it.
  if (!usage && !rt->ledger) return;
  ledger::ledger_entry e;
  if (const auto* name = key_name()) e.key = *name;
  e.model = spec.model;
  const auto upstream = life->current_upstream();
  if (upstream < rt->cfg.upstreams.size()) e.upstream = rt->cfg.upstreams[upstream].name;
  if (usage) {
    e.usage.prompt = usage->prompt.value_or(0);
    e.usage.completion = usage->completion.value_or(0);
    e.usage.cached = usage->cached.value_or(0);
  } else {
    e.usage.estimated = true;
    e.usage.prompt = spec.prompt_tokens;
    e.usage.completion = relayed_tokens;
  }
  if (caller_left_ns && first_byte_ns) {
    e.usage.waste = ledger::waste_tokens(*first_byte_ns, *caller_left_ns,
                                         std::max(last_release_ns, last_work_end_ns.value_or(0)),
                                         relayed_tokens);
  }
  if (const auto price = ledger::price_of(rt->cfg, spec.model, e.upstream))
    e.usage.spend_nanousd = ledger::spend_of(e.usage, *price);
  rt->stats->tokens_used(e.key, upstream, spec.model, e.usage);
  if (!rt->ledger) return;
  if (budget_admitted || !rt->ledger_tally) {
    if (budget_admitted) e.admitted = *budget_admitted;
    self->send(rt->ledger, ledger_record_atom::value, std::move(e));
    return;
  }
  rt->ledger_tally->add(e.key, e.model, e.upstream, e.usage);
}

// Every attempt and connection has ended: count, log, trace, quit.
void request_state::finish() {
  const std::int64_t end_ns = now_ns();
  // Counted once every connection has said whether it held a slot, before the line is written:
  // whoever has seen the line sees it in /metrics too.
  std::size_t kept = 0;
  for (std::size_t i = 0; i < attempts.size(); ++i) {
    if (!attempt_work[i].held_slot) continue;
    rt->stats->attempt_done(attempt_work[i].upstream, attempts[i].result,
                            attempts[i].stale_connection);
    if (kept != i) attempts[kept] = std::move(attempts[i]);
    ++kept;
  }
  attempts.resize(kept);
  const auto result = life->result();
  access_record r;
  r.request_id = spec.request_id;
  r.model = spec.model;
  std::string target;  // the path with its query string, as received: only when it had one
  if (!spec.query.empty()) target = spec.path + spec.query;
  r.path = spec.query.empty() ? std::string_view{spec.path} : std::string_view{target};
  r.stream = spec.stream;
  r.result = result;
  r.status = life->status();
  if (spec.deadline) r.deadline_ms = static_cast<double>(spec.deadline->count());
  r.queue_wait_ms = static_cast<double>(queue_wait_ns) / 1e6;
  if (first_byte_ns) r.ttfb_ms = ms_since_arrival(*first_byte_ns);
  r.duration_ms = ms_since_arrival(answered_ns.value_or(end_ns));
  if (caller_left_ns) r.caller_left_ms = ms_since_arrival(*caller_left_ns);
  if (last_work_end_ns) r.work_ended_ms = ms_since_arrival(*last_work_end_ns);
  r.cancel_latency_ms = cancel_latency_ms;
  r.client_retry = spec.client_retry;
  if (!spec.client_session.empty()) r.client_session = spec.client_session;
  if (spec.call) r.call_try = spec.call_try;
  if (const auto* name = key_name()) r.key = *name;
  if (usage) {
    r.prompt_tokens = usage->prompt;
    r.completion_tokens = usage->completion;
    r.cached_tokens = usage->cached;
  }
  correct_rate_charge();
  record_usage();
  r.attempts = {attempts.data(), attempts.size()};
  rt->stats->request_done(spec.model, result, r.duration_ms / 1000.0);
  write_access_log(r);
  // A 499 is logged, never sent.
  std::optional<int> sent;
  if (result != outcome::client_disconnected) sent = life->status();
  trace->finish("POST", spec.path, spec.model, spec.request_id, sent, result, end_ns);
  self->quit();
}

void request_state::begin(caf::event_based_actor* actor, runtime_ptr runtime,
                          std::shared_ptr<net::response_channel> caller, request_spec request) {
  self = actor;
  rt = std::move(runtime);
  channel = std::move(caller);
  spec = std::move(request);
  arrival_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(spec.arrival.time_since_epoch()).count();
  arrival_wall_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count() -
                    (now_ns() - arrival_ns);
  timers.emplace(rt->timers.get(), self->address());
  trace.emplace(rt->tracer.get(), spec.traceparent.empty() ? nullptr : &spec.traceparent,
                arrival_ns);
  life.emplace(rt->cfg, *rt->routes, *rt->retries, *rt->health, rt->routes->chain_of(spec.model),
               spec.where, request_deadline{spec.arrival, spec.deadline}, rt->backoff_jitter);
  if (spec.prefer_upstream) life->prefer_upstream(*spec.prefer_upstream);
  if (spec.call_try > 1) {
    life->retry_of_call();
    life->carry_attempts(spec.call_attempts);
    if (spec.call_spent) life->out_of_attempts(*spec.call_spent);
  }
  if (spec.affinity) life->set_affinity(*spec.affinity);
  if (spec.check_rate || spec.check_budget) life->await_admission();
  rt->stats->requests_in_flight_add(1);
}

// Carries out the lifecycle's first commands but its finish (the caller, who cannot quit an
// actor still being made, sends the finish as a message): true when it said finish.
bool request_state::start() {
  const auto& first = life->start(now());
  for (const auto& c : first) {
    if (c.what != command::kind::finish) execute(c, nullptr);
  }
  return !first.empty() && first.back().what == command::kind::finish;
}

bool request_state::is_attempt(const caf::actor_addr& who) const {
  return std::any_of(live.begin(), live.end(),
                     [&](const auto& a) { return a.actor.address() == who; });
}

void request_state::attempt_exited(const caf::actor_addr& who) {
  auto it = std::find_if(live.begin(), live.end(),
                         [&](const auto& a) { return a.actor.address() == who; });
  if (it == live.end()) return;
  const auto index = it->index;
  live.erase(it);
  run(life->on_attempt_exited(index, now()));
}

// A deadline's cancel was decided when the deadline passed, not when its message arrived: the
// socket closes at that moment where it lives (close_at), often before the actor gets to it.
std::int64_t request_state::decided_at(stop_reason why, std::int64_t now) const {
  const auto due = life->deadline().due();
  if (why != stop_reason::deadline || !due) return now;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(due->time_since_epoch()).count();
}

void request_state::caller_gone(std::int64_t left_ns) {
  if (life->answered()) return;
  // The moment the gateway saw the caller leave is when the cancel was decided.
  caller_left_ns = left_ns;
  cancel_decided_ns = left_ns;
  trace->event("caller_left", left_ns);
  run(life->on_client_gone());
}

// One connection's end, with what it says about its slot: the cancel's latency and any work
// that outlived the answer are counted here.
void request_state::work_ended(std::uint64_t upstream, std::uint32_t attempt_index,
                               std::int64_t closed_ns, bool held_slot,
                               std::int64_t connection_queue_wait_ns, std::int64_t head_ns,
                               std::int64_t released_ns) {
  if (attempt_index < attempt_work.size()) attempt_work[attempt_index].held_slot = held_slot;
  if (head_ns != 0 && attempt_index < attempts.size())
    attempts[attempt_index].head_ms = ms_since_arrival(head_ns);
  if (attempt_index < attempts.size())
    attempts[attempt_index].engine_released_ms = ms_since_arrival(released_ns);
  queue_wait_ns += connection_queue_wait_ns;
  last_work_end_ns = std::max(last_work_end_ns.value_or(0), closed_ns);
  last_release_ns = std::max(last_release_ns, released_ns);
  trace->event("work_ended", closed_ns);
  if (held_slot && cancel_decided_ns && closed_ns >= *cancel_decided_ns) {
    double latency = static_cast<double>(closed_ns - *cancel_decided_ns) / 1e9;
    rt->stats->cancel_latency(latency);
    cancel_latency_ms = std::max(cancel_latency_ms.value_or(0), latency * 1e3);
  }
  if (held_slot && answered_ns && closed_ns > *answered_ns) {
    rt->stats->late_work(upstream, static_cast<double>(closed_ns - *answered_ns) / 1e9);
  }
  run(life->on_connection_ended());
}

// What is left of the deadline the caller declared itself; nullopt when it declared none.
std::optional<milliseconds> request_state::caller_left() const {
  if (!spec.caller_deadline) return std::nullopt;
  auto spent = std::chrono::duration_cast<milliseconds>(now() - spec.arrival);
  return std::max(milliseconds{0}, *spec.caller_deadline - spent);
}

// The state lives in the actor object and goes in its on_exit (caf::stateful_actor): one
// allocation for both, and none for the arguments (a function-based actor carries them in a heap
// tuple to its first run). The handlers hold a plain pointer to it, which saves the atomic
// reference counting of shared copies on every message; no handler runs after on_exit.
class request_actor final : public caf::stateful_actor<request_state> {
 public:
  request_actor(caf::actor_config& cfg, runtime_ptr rt,
                std::shared_ptr<net::response_channel> channel, request_spec spec)
      : caf::stateful_actor<request_state>(cfg) {
    state.begin(this, std::move(rt), std::move(channel), std::move(spec));
  }

  caf::behavior make_behavior() override {
    request_state* st = &state;
    // An attempt's end comes through its link, whatever its reason; an attempt this actor
    // stopped is no longer linked, and its end comes as the down_msg of the monitor the cancel
    // set. Any other exit is the supervisor's (a drain, or its own end): the caller is answered
    // and the tree goes down, and this actor lives on until its work ended.
    set_exit_handler([st](caf::exit_msg& msg) {
      if (st->is_attempt(msg.source)) {
        st->attempt_exited(msg.source);
      } else if (msg.reason != caf::exit_reason::normal) {
        st->run(st->life->on_drain());
      }
    });
    set_down_handler([st](caf::down_msg& msg) { st->attempt_exited(msg.source); });

    // Quitting is not possible while the actor is being made; a request answered at once (a
    // spent budget) finishes on its first message.
    if (st->start()) send(this, finish_atom::value);

    return {
        one_way([st](attempt_result_atom, int status, net::header_list& headers,
                     std::string& body) {
          held_response held{status, &headers, &body};
          st->run(
              st->life->on_response(
                  status, parse_retry_after(net::find_header(headers, "retry-after")), st->now()),
              &held);
        }),
        one_way([st](attempt_head_atom, int status, net::header_list& headers) {
          held_response held{status, &headers, nullptr};
          st->run(st->life->on_stream_head(status), &held);
        }),
        one_way([st](attempt_events_atom, net::sse_events& events) { st->relay_events(events); }),
        one_way([st](attempt_end_atom) { st->run(st->life->on_stream_end()); }),
        one_way([st](attempt_failed_atom, std::int32_t kind, std::string& message, bool committed) {
          st->run(st->life->on_attempt_failed(static_cast<attempt_end>(kind), message, committed,
                                              st->now()));
        }),
        one_way([st](backoff_atom, std::uint64_t generation) {
          st->run(st->life->on_backoff_due(generation, st->now()));
        }),
        one_way([st](deadline_atom) {
          st->trace->event("deadline_exceeded", now_ns());
          st->run(st->life->on_deadline());
        }),
        one_way([st](client_gone_atom, std::int64_t left_ns) { st->caller_gone(left_ns); }),
        one_way([st](work_ended_atom, std::uint64_t upstream, std::uint32_t attempt_index,
                     std::int64_t closed_ns, bool held_slot, std::int64_t queue_wait_ns,
                     std::int64_t head_ns, std::int64_t released_ns) {
          st->work_ended(upstream, attempt_index, closed_ns, held_slot, queue_wait_ns, head_ns,
                         released_ns);
        }),
        one_way([st](finish_atom) { st->finish(); }),
    };
  }
};

}  // namespace

caf::actor spawn_request(caf::actor_system& system, runtime_ptr rt,
                         std::shared_ptr<net::response_channel> channel, request_spec spec) {
  return system.spawn<request_actor>(std::move(rt), std::move(channel), std::move(spec));
}

}  // namespace tether
