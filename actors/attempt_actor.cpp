// An attempt and the upstream connection it holds, in one file because the one lives only as the
// other's child: the attempt decides its timers (the per-try clock, the stream idle timeout) and
// reports what the upstream said to the request; the connection owns the budget slot and the
// socket, and exits only after the socket's close.
#include "actors/attempt_actor.hpp"

#include <optional>

#include "actors/actor_timers.hpp"
#include "actors/engine_abort.hpp"
#include "actors/messages.hpp"
#include "actors/one_way.hpp"
#include "actors/policy/admission/slot_refusal.hpp"
#include "actors/policy/engine/decode_step.hpp"
#include "actors/policy/engine/release_grace.hpp"
#include "actors/policy/request/idle_watch.hpp"
#include "actors/policy/request/retry_policy.hpp"
#include "actors/policy/wire/answer_end.hpp"
#include "actors/policy/wire/stream_assembly.hpp"
#include "actors/relay_events.hpp"
#include "net/sse_framer.hpp"

namespace tether {

// ---- the attempt ------------------------------------------------------------------------------

namespace {

// Largest SSE event accepted from an upstream before the stream counts as malformed.
constexpr std::size_t max_sse_event_bytes = 1 << 20;

// The attempt's state and its steps. The handlers capture a pointer to it, not copies of the
// steps they call: a behavior that held such copies grew large, and every attempt built one.
struct attempt_state {
  caf::event_based_actor* self = nullptr;
  net::timer_service* timer_service = nullptr;
  std::chrono::milliseconds idle_timeout{0};
  std::chrono::milliseconds attempt_timeout{0};
  bool stream_requested = false;  // the upstream was asked for a stream
  surface where = surface::chat;
  // upstream_stream = "always" for a caller who did not ask for a stream: the surface whose
  // events are assembled into the whole answer, and the answer's limit.
  std::optional<surface> assemble_on;
  stream_assembly_shape assemble_shape;
  std::uint64_t max_response_bytes = 0;

  int status = 0;
  net::header_list headers;
  bool streaming = false;  // a 2xx answer to a streaming request: relayed event by event
  bool committed = false;
  bool done = false;
  std::string body;
  net::sse_framer framer{max_sse_event_bytes};
  std::optional<idle_watch> idle;           // with a stream idle timeout
  std::optional<stream_assembly> assembly;  // a 2xx stream being assembled
  // The per-try and stream idle timers; pending ones are cancelled when the state goes, in the
  // actor's on_exit (an attach_functor would cost allocations and the actor's mutex per attempt).
  std::optional<actor_timers> timers;
  caf::actor request;
  caf::actor connection;
  // The upstream's decode step, fed from the stream's token events; null for engine = "openai".
  std::shared_ptr<decode_step> step;
  std::optional<std::chrono::nanoseconds> last_token;  // when the previous token event came

  void finish();
  void observe_steps(const net::sse_events& events);
  void fail(attempt_end kind, std::string message);
  void arm_attempt_timer();
  void arm_idle();
  void on_idle_timer();
  void relay_events(net::sse_events events);
  void assemble(const net::sse_events& events);
  void end_assembly();
  void on_head(int status, net::header_list& headers);
  void on_body(std::string& bytes);
  void on_end();
};

// The request learns of this actor's end through their link (its exit_msg, whatever the reason).
// The connection is unlinked first: on a normal end it finishes its exchange, and the exit_msg
// would only be ignored.
void attempt_state::finish() {
  self->unlink_from(connection);
  self->quit();
}

void attempt_state::fail(attempt_end kind, std::string message) {
  if (done) return;
  done = true;
  self->send(request, attempt_failed_atom::value, static_cast<std::int32_t>(kind),
             std::move(message), committed);
  // Not a normal exit: the linked connection actor takes it as "stop the work".
  self->quit(caf::exit_reason::user_shutdown);
}

// The per-try clock starts once the attempt may use the upstream (the slot is granted): queue
// wait is bounded by the budget's queue limit and the request deadline instead.
void attempt_state::arm_attempt_timer() {
  if (attempt_timeout.count() <= 0 || done) return;
  if (!timers) timers.emplace(timer_service, self->address());
  timers->after(attempt_timeout, attempt_timeout_atom::value);
}

// An event came: the idle timer, if none is pending, is armed for the whole limit.
void attempt_state::arm_idle() {
  if (idle_timeout.count() <= 0) return;
  if (!idle) idle.emplace(idle_timeout);
  if (!idle->on_event(timer_service->now())) return;
  if (!timers) timers.emplace(timer_service, self->address());
  timers->after(idle->limit(), idle_timeout_atom::value);
}

// An assembled answer is not committed until it is whole, but its stream's gaps are bounded as
// a relayed stream's are.
void attempt_state::on_idle_timer() {
  if (!idle || (!committed && !assembly) || done) return;
  if (auto again = idle->on_fire(timer_service->now())) {
    timers->after(*again, idle_timeout_atom::value);
    return;
  }
  fail(attempt_end::timeout, "stream idle timeout");
}

// A decode step is the gap between two reads that brought token events, shared among them; the
// gap before the first is the prefill (actors/policy/engine/decode_step.hpp).
void attempt_state::observe_steps(const net::sse_events& events) {
  std::size_t tokens = 0;
  for (std::size_t i = 0; i < events.size(); ++i) tokens += is_token_event(events[i]) ? 1 : 0;
  if (tokens == 0) return;
  const auto now = timer_service->now();
  if (last_token) step->observe(now - *last_token, tokens);
  last_token = now;
}

void attempt_state::relay_events(net::sse_events events) {
  if (events.empty()) return;
  if (step) observe_steps(events);
  if (!committed) {
    committed = true;
    self->send(request, attempt_head_atom::value, status, headers);
  }
  // The answer's last event ends the caller's stream at once, in order behind it, without
  // waiting for the upstream's end of the body: a caller who closes as soon as it has read that
  // event was answered whole. The connection goes on to read that end, as after any answer.
  const bool last = ends_answer(where, events[events.size() - 1]);
  // One message for all the events of one read: a stream that fell behind is caught up in as
  // many hops, and writes to the caller, as reads, not as events.
  self->send(request, attempt_events_atom::value, std::move(events));
  if (last) {
    done = true;
    self->send(request, attempt_end_atom::value);
    finish();
    return;
  }
  arm_idle();
}

// The events of one upstream read go into the assembled answer; the gaps between them are
// bounded by the stream idle timeout.
void attempt_state::assemble(const net::sse_events& events) {
  for (std::size_t i = 0; i < events.size(); ++i) assembly->add(events[i]);
  if (assembly->failed() != stream_assembly::failure::none) {
    fail(assembly->failed() == stream_assembly::failure::too_large ? attempt_end::too_large
                                                                   : attempt_end::malformed,
         assembly->error());
    return;
  }
  if (!events.empty()) arm_idle();
}

// The caller gets the whole answer the engine would have sent: a JSON body, whose head no longer
// describes an event stream.
void attempt_state::end_assembly() {
  assemble(framer.finish());
  if (done) return;
  const auto unix_s = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  auto answer = assembly->finish(unix_s);
  if (assembly->failed() != stream_assembly::failure::none) {
    fail(assembly->failed() == stream_assembly::failure::too_large ? attempt_end::too_large
                                                                   : attempt_end::malformed,
         assembly->error());
    return;
  }
  std::erase_if(headers, [](const net::http_header& h) {
    return h.name == "content-type" || h.name == "content-length" ||
           h.name == "transfer-encoding" || h.name == "cache-control" || h.name == "connection";
  });
  headers.push_back({"content-type", "application/json"});
  done = true;
  self->send(request, attempt_result_atom::value, status, std::move(headers), std::move(answer));
  finish();
}

void attempt_state::on_head(int head_status, net::header_list& head) {
  status = head_status;
  headers = std::move(head);
  streaming = relayed_as_stream(stream_requested, status, headers);
  if (streaming && assemble_on) assembly.emplace(*assemble_on, max_response_bytes, assemble_shape);
}

// A body that is not relayed as a stream is held to max_response_bytes before it gets here
// (relay_events, on the io thread).
void attempt_state::on_body(std::string& bytes) {
  if (done) return;
  if (streaming) {
    auto events = framer.feed(std::move(bytes));
    if (framer.overflowed()) {
      fail(attempt_end::malformed, "upstream sent an SSE event larger than 1 MiB");
      return;
    }
    if (assembly) return assemble(events);
    relay_events(std::move(events));
    return;
  }
  if (body.empty()) {
    body = std::move(bytes);
  } else {
    body += bytes;
  }
}

void attempt_state::on_end() {
  if (done) return;
  if (assembly) return end_assembly();
  if (streaming) {
    // An unterminated tail is not a whole event; it is dropped rather than cut into.
    relay_events(framer.finish());
    if (!committed && framer.has_partial()) {
      fail(attempt_end::malformed, "upstream stream ended inside its first event");
      return;
    }
    if (!committed) {
      // A 2xx stream with an empty body: nothing was relayed, so it is an ordinary answer.
      done = true;
      self->send(request, attempt_result_atom::value, status, std::move(headers), std::string{});
      finish();
      return;
    }
    done = true;
    self->send(request, attempt_end_atom::value);
    finish();
    return;
  }
  done = true;
  // The head and body go with the answer (copying the head cost three allocations).
  self->send(request, attempt_result_atom::value, status, std::move(headers), std::move(body));
  finish();
}

attempt_end failure_kind(std::int32_t net_kind) {
  switch (net_kind) {
    case up_fail_overloaded:
      return attempt_end::overloaded;
    case up_fail_shutting_down:
      return attempt_end::shutting_down;
    case up_fail_too_heavy:
      return attempt_end::too_heavy;
    case up_fail_too_large:
      return attempt_end::too_large;
    case static_cast<std::int32_t>(net::upstream_failure::connect_failed):
    case static_cast<std::int32_t>(net::upstream_failure::tls_failed):
      return attempt_end::connect_failed;
    case static_cast<std::int32_t>(net::upstream_failure::reset):
      return attempt_end::reset;
    case static_cast<std::int32_t>(net::upstream_failure::stale_connection):
      return attempt_end::stale_connection;
    default:
      return attempt_end::malformed;
  }
}

// The state lives in the actor object and goes in its on_exit (caf::stateful_actor): one
// allocation for both, and none for the arguments (a function-based actor carries them in a heap
// tuple to its first run). The handlers hold a plain pointer to it.
class attempt_actor final : public caf::stateful_actor<attempt_state> {
 public:
  attempt_actor(caf::actor_config& cfg, runtime_ptr rt, caf::actor request, attempt_spec spec)
      : caf::stateful_actor<attempt_state>(cfg),
        rt_(std::move(rt)),
        connection_(std::move(spec.connection)) {
    state.self = this;
    state.timer_service = rt_->timers.get();
    state.idle_timeout = spec.idle_timeout;
    state.attempt_timeout = spec.timeout;
    state.stream_requested = spec.stream || spec.assemble.has_value();
    state.where = spec.where;
    state.assemble_on = spec.assemble;
    // The answer is shaped as this engine's own whole answer where engines differ.
    if (spec.assemble && connection_.upstream < rt_->cfg.upstreams.size())
      state.assemble_shape.content_never_null =
          rt_->cfg.upstreams[connection_.upstream].engine == config::engine_kind::llamacpp;
    state.max_response_bytes = spec.connection.max_response_bytes;
    state.request = std::move(request);
    if (connection_.upstream < rt_->decode_steps.size())
      state.step = rt_->decode_steps[connection_.upstream];
    // The per-try clock starts at the grant, so the connection tells of it when there is one.
    connection_.tell_grant = spec.timeout.count() > 0;
  }

  caf::behavior make_behavior() override {
    attempt_state* st = &state;
    // The request counted this connection when it started the attempt: it waits for its
    // work_ended whatever happens next.
    st->connection = spawn_connection(this, std::move(rt_), st->request, std::move(connection_));
    return {
        one_way([st](up_head_atom, int status, net::header_list& headers) {
          st->on_head(status, headers);
        }),
        one_way([st](up_body_atom, std::string& bytes) { st->on_body(bytes); }),
        one_way([st](up_end_atom) { st->on_end(); }),
        // A response that was not an event stream, held by net/'s relay until it was complete:
        // one message instead of head, body and end (the connection, below).
        one_way([st](up_whole_atom, int status, net::header_list& headers, std::string& body) {
          st->on_head(status, headers);
          if (!body.empty()) st->on_body(body);
          st->on_end();
        }),
        one_way([st](up_fail_atom, std::int32_t kind, std::string& message) {
          st->fail(failure_kind(kind), std::move(message));
        }),
        one_way([st](granted_atom) { st->arm_attempt_timer(); }),
        one_way([st](attempt_timeout_atom) {
          if (st->committed) return;
          st->fail(attempt_end::timeout, "attempt timed out");
        }),
        one_way([st](idle_timeout_atom) { st->on_idle_timer(); }),
    };
  }

 private:
  // Until the first run, which spawns the connection with them.
  runtime_ptr rt_;
  connection_spec connection_;
};

}  // namespace

caf::actor spawn_attempt(caf::event_based_actor* request, runtime_ptr rt, attempt_spec spec) {
  return request->spawn<attempt_actor, caf::linked>(
      std::move(rt), caf::actor_cast<caf::actor>(request), std::move(spec));
}

// ---- its connection ---------------------------------------------------------------------------

namespace {

// The actor's state lives in the actor object: one allocation for both, and none for the
// arguments (a function-based actor carries them in a heap tuple to its first run).
class connection_actor final : public caf::event_based_actor {
 public:
  connection_actor(caf::actor_config& cfg, runtime_ptr rt, caf::actor attempt, caf::actor request,
                   connection_spec spec)
      : caf::event_based_actor(cfg),
        rt_(std::move(rt)),
        attempt_(std::move(attempt)),
        request_(std::move(request)),
        spec_(std::move(spec)) {}

  caf::behavior make_behavior() override {
    // Whatever the parent's reason, the work stops; the close is awaited, not assumed.
    set_exit_handler([this](caf::exit_msg& msg) {
      if (msg.reason != caf::exit_reason::normal) cancel();
    });
    // However this actor ends (normally, an exception, an unexpected kill), the request hears of
    // the end: it waits for one work_ended per connection its attempts started, so the report is
    // sent from here rather than before a quit that may not be reached. (One message instead of
    // the report plus the down_msg of a monitor.) It runs in the actor's cleanup, after on_exit;
    // CAF runs the newest attachable first, so the budget's monitor, set later, fires before it.
    attach_functor([this](const caf::error&) { report_end(); });
    ask_for_slot();
    return {
        one_way([this](grant_atom, std::int32_t refusal, const std::string& reason) {
          budget_answered(static_cast<slot_refusal>(refusal), reason);
        }),
        one_way([this](up_closed_atom, std::int64_t closed_ns, std::int64_t head_ns, bool cut) {
          head_ns_ = head_ns;
          finish(closed_ns, cut);
        }),
        one_way([this](grace_over_atom) { quit(); }),
    };
  }

  // Every end passes here first (CAF calls it on a quit and on an unreachable actor's
  // destruction): a socket still open is closed, and the handles this actor holds go now, not
  // when the last handle on it does (the exchange's events hold one until net's last call).
  void on_exit() override {
    if (lingering_counted_) rt_->stats->upstream_lingering_add(spec_.upstream, -1);
    timers_.reset();
    lingering_hold_ = nullptr;
    if (exchange_ && !closed_) exchange_->cancel();
    exchange_.reset();
    attempt_ = nullptr;
    rt_.reset();
  }

 private:
  void ask_for_slot();
  void budget_answered(slot_refusal refusal, const std::string& reason);
  void cancel();
  void finish(std::int64_t at_ns, bool cut = false);
  std::chrono::nanoseconds grace_after(bool cut) const;
  bool engine_counts_release() const;
  void report_end();

  runtime_ptr rt_;
  caf::actor attempt_;
  caf::actor request_;
  connection_spec spec_;
  std::shared_ptr<net::upstream_exchange> exchange_;
  bool answered_ = false;  // the budget's first answer decides; a later one is a duplicate
  bool granted_ = false;
  bool closing_ = false;
  bool closed_ = false;
  std::optional<std::int64_t> closed_ns_;
  std::int64_t asked_ns_ = 0;
  std::int64_t queue_wait_ns_ = 0;  // asked → the budget's answer, or → the end if none came
  std::int64_t head_ns_ = 0;        // when the response's head arrived; 0: it never did
  std::optional<actor_timers> timers_;  // the release grace's, when a cut attempt has one
  bool lingered_ = false;               // the slot was held past the close for a release grace
  bool lingering_counted_ = false;      // ... until the engine's count let it go
  // While it lingers nothing else holds this actor (the relay let go at the close, the timer
  // holds only its address): without this handle it would be collected, and its slot freed, at
  // once. Dropped when it quits.
  caf::actor lingering_hold_;
};

void connection_actor::ask_for_slot() {
  asked_ns_ = now_ns();
  send(spec_.budget ? spec_.budget : rt_->budget, acquire_atom::value,
       static_cast<std::uint64_t>(spec_.upstream), spec_.key, spec_.rank, spec_.tokens);
}

// The exchange starts only with a slot: no socket is opened for work the budget has not counted.
void connection_actor::budget_answered(slot_refusal refusal, const std::string& reason) {
  // A second answer comes only when a lost budget host's claims were re-asked locally
  // (budget_link_actor); the local budget counts this actor either way.
  if (closing_ || closed_ || answered_) return;
  answered_ = true;
  queue_wait_ns_ = now_ns() - asked_ns_;
  if (refusal != slot_refusal::none) {
    send(attempt_, up_fail_atom::value,
         refusal == slot_refusal::stopping    ? up_fail_shutting_down
         : refusal == slot_refusal::too_heavy ? up_fail_too_heavy
                                              : up_fail_overloaded,
         reason);
    finish(now_ns());
    return;
  }
  granted_ = true;
  if (spec_.tell_grant) send(attempt_, granted_atom::value);
  auto events = std::make_shared<relay_events>(caf::actor_cast<caf::actor>(this), attempt_,
                                               spec_.stream, spec_.max_response_bytes);
  exchange_ =
      rt_->upstreams[spec_.upstream]->start(std::move(spec_.request), events, spec_.affinity);
  events->attach(exchange_);
}

void connection_actor::cancel() {
  if (closing_ || closed_) return;
  closing_ = true;
  if (exchange_) {
    exchange_->cancel();  // net answers with on_closed once the socket is closed
  } else {
    finish(now_ns());  // still queued or never started: nothing to close
  }
}

// The socket's end is this actor's end: the exit frees the budget slot (the budget's monitor)
// and reports the work's end to the request (report_end). A cut attempt whose engine may still
// be decoding it lingers for its release grace first, holding the slot, so that the budget counts
// the engine's work and the next request is not let in to wait inside the engine.
void connection_actor::finish(std::int64_t at_ns, bool cut) {
  if (closed_) return;
  closed_ = true;
  // Ended while still queued (the tree was cancelled): the whole wait was queue wait.
  if (!answered_) queue_wait_ns_ = at_ns - asked_ns_;
  closed_ns_ = at_ns;
  // The request went out and tether cut it (the caller left, the deadline, a cancel): an engine
  // that does not stop at the close is told by the attempt's rid. Here rather than in cancel(),
  // which the deadline does not pass through (net closes the socket at close_at itself).
  if (cut && !spec_.engine_rid.empty()) send_engine_abort(*rt_, spec_.upstream, spec_.engine_rid);
  if (const auto grace = grace_after(cut); grace.count() > 0) {
    lingered_ = true;
    lingering_hold_ = caf::actor_cast<caf::actor>(this);
    timers_.emplace(rt_->timers.get(), address());
    if (!engine_counts_release()) {
      timers_->after(grace, grace_over_atom::value);
      return;
    }
    // The engine's own count says when it let go; the bound holds if it never does (other
    // clients' work in the engine hides this attempt's end). Expected let go after its decode
    // steps, when the metrics actor polls for it.
    const auto& upstream = rt_->cfg.upstreams[spec_.upstream];
    const auto* step = decode_step_of(*rt_, spec_.upstream);
    const bool stepped = step != nullptr && step->current().has_value();
    const std::int64_t due =
        at_ns + (stepped ? grace : std::chrono::nanoseconds{grace_slack}).count();
    const std::int64_t bound = at_ns + std::chrono::nanoseconds{upstream.release_grace_max}.count();
    rt_->stats->upstream_lingering_add(spec_.upstream, 1);
    lingering_counted_ = true;
    send(rt_->engine_monitor, linger_atom::value, static_cast<std::uint64_t>(spec_.upstream), at_ns,
         due, bound, address());
    timers_->after(upstream.release_grace_max, grace_over_atom::value);
    return;
  }
  quit();
}

// With the upstream's metrics read, its engine's running count decides the release (contract:
// "The budget holds until the engine has let go"); not on a cluster, whose engines' counts cover
// other nodes' work too.
bool connection_actor::engine_counts_release() const {
  const auto& upstream = rt_->cfg.upstreams[spec_.upstream];
  return !upstream.metrics_path.empty() && rt_->engine_monitor &&
         rt_->cfg.cluster.budget_listen.empty() && rt_->cfg.cluster.budget_host.empty() &&
         rt_->stats->engine_counts_known(spec_.upstream);
}

std::chrono::nanoseconds connection_actor::grace_after(bool cut) const {
  if (!cut || spec_.upstream >= rt_->cfg.upstreams.size()) return std::chrono::nanoseconds{0};
  const auto& upstream = rt_->cfg.upstreams[spec_.upstream];
  const auto* step = decode_step_of(*rt_, spec_.upstream);
  // The relay's "cut" says both that the request went out and that tether cut the exchange.
  return release_grace({upstream.engine != config::engine_kind::openai, granted_, cut, cut},
                       step != nullptr ? step->current() : std::nullopt,
                       upstream.release_grace_max);
}

void connection_actor::report_end() {
  const auto ended_ns = closed_ns_.value_or(now_ns());
  if (!answered_) queue_wait_ns_ = ended_ns - asked_ns_;
  caf::anon_send(request_, work_ended_atom::value, static_cast<std::uint64_t>(spec_.upstream),
                 spec_.attempt_index, ended_ns, granted_, queue_wait_ns_, head_ns_,
                 lingered_ ? now_ns() : ended_ns);
  request_ = nullptr;
}

}  // namespace

caf::actor spawn_connection(caf::event_based_actor* attempt, runtime_ptr rt, caf::actor request,
                            connection_spec spec) {
  return attempt->spawn<connection_actor, caf::linked>(
      std::move(rt), caf::actor_cast<caf::actor>(attempt), std::move(request), std::move(spec));
}

}  // namespace tether
