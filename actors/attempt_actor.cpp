#include "actors/attempt_actor.hpp"

#include "actors/actor_timers.hpp"
#include "actors/messages.hpp"
#include "actors/one_way.hpp"
#include "actors/policy/idle_watch.hpp"
#include "actors/policy/retry_policy.hpp"
#include "actors/relay_events.hpp"
#include "net/sse_framer.hpp"

namespace tether {
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
  bool stream_requested = false;

  int status = 0;
  net::header_list headers;
  bool streaming = false;  // a 2xx answer to a streaming request: relayed event by event
  bool committed = false;
  bool done = false;
  std::string body;
  net::sse_framer framer{max_sse_event_bytes};
  std::optional<idle_watch> idle;  // with a stream idle timeout
  // The per-try and stream idle timers; pending ones are cancelled when the state goes, in the
  // actor's on_exit (an attach_functor would cost allocations and the actor's mutex per attempt).
  std::optional<actor_timers> timers;
  caf::actor request;
  caf::actor connection;

  void finish();
  void fail(attempt_end kind, std::string message);
  void arm_attempt_timer();
  void arm_idle();
  void on_idle_timer();
  void relay_events(net::sse_events events);
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

void attempt_state::on_idle_timer() {
  if (!idle || !committed || done) return;
  if (auto again = idle->on_fire(timer_service->now())) {
    timers->after(*again, idle_timeout_atom::value);
    return;
  }
  fail(attempt_end::timeout, "stream idle timeout");
}

void attempt_state::relay_events(net::sse_events events) {
  if (events.empty()) return;
  if (!committed) {
    committed = true;
    self->send(request, attempt_head_atom::value, status, headers);
  }
  // One message for all the events of one read: a stream that fell behind is caught up in as
  // many hops, and writes to the caller, as reads, not as events.
  self->send(request, attempt_events_atom::value, std::move(events));
  arm_idle();
}

void attempt_state::on_head(int head_status, net::header_list& head) {
  status = head_status;
  headers = std::move(head);
  streaming = relayed_as_stream(stream_requested, status, headers);
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
    case up_fail_too_large:
      return attempt_end::too_large;
    case static_cast<std::int32_t>(net::upstream_failure::connect_failed):
    case static_cast<std::int32_t>(net::upstream_failure::tls_failed):
      return attempt_end::connect_failed;
    case static_cast<std::int32_t>(net::upstream_failure::reset):
      return attempt_end::reset;
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
    state.stream_requested = spec.stream;
    state.request = std::move(request);
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
        // one message instead of head, body and end (connection_actor.cpp).
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

}  // namespace tether
