#include "actors/attempt_actor.hpp"

#include "actors/actor_timers.hpp"
#include "actors/messages.hpp"
#include "actors/policy/retry_policy.hpp"
#include "actors/relay_events.hpp"
#include "net/sse_framer.hpp"

namespace tether {
namespace {

// Largest SSE event accepted from an upstream before the stream counts as malformed.
constexpr std::size_t max_sse_event_bytes = 1 << 20;

struct attempt_state {
  int status = 0;
  net::header_list headers;
  bool streaming = false;  // a 2xx answer to a streaming request: relayed event by event
  bool committed = false;
  bool done = false;
  std::string body;
  net::sse_framer framer{max_sse_event_bytes};
  std::uint64_t idle_generation = 0;
  // Made for a stream's idle timer only; cancelled when the state goes with the behavior
  // (request_actor.cpp's request_state says why there is no attach_functor).
  std::optional<actor_timers> timers;
  std::shared_ptr<net::timer> idle_timer;
  caf::actor request;
  caf::actor connection;
};

attempt_end failure_kind(std::int32_t net_kind) {
  switch (net_kind) {
    case up_fail_overloaded:
      return attempt_end::overloaded;
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

}  // namespace

caf::behavior attempt_actor(caf::event_based_actor* self, runtime_ptr rt, caf::actor request,
                            attempt_spec spec) {
  // Owned by the behavior returned below; the handlers hold a plain pointer (request_actor.cpp
  // says why).
  auto owner = std::make_shared<attempt_state>();
  attempt_state* st = owner.get();
  st->request = std::move(request);

  // The request learns of this actor's end from its monitor; the links are for a request that
  // dies (its exit reaches the attempts) and for the connection (below). Unlinking first saves
  // an exit_msg the receiver would only ignore: two messages per request.
  auto finish = [self, st] {
    self->unlink_from(st->request);
    self->unlink_from(st->connection);  // a normal end: the connection finishes its exchange
    self->quit();
  };

  auto fail = [self, st](attempt_end kind, std::string message) {
    if (st->done) return;
    st->done = true;
    self->send(st->request, att_fail_atom::value, static_cast<std::int32_t>(kind),
               std::move(message), st->committed);
    self->unlink_from(st->request);
    // Not a normal exit: the linked connection actor takes it as "stop the work".
    self->quit(caf::exit_reason::user_shutdown);
  };

  auto arm_idle = [self, st, service = rt->timers.get(), idle = spec.idle_timeout] {
    if (idle.count() <= 0) return;
    if (!st->timers) st->timers.emplace(service, self->address());
    if (st->idle_timer) st->idle_timer->cancel();
    st->idle_timer = st->timers->after(idle, idle_timeout_atom::value, ++st->idle_generation);
  };

  auto relay_events = [self, st, arm_idle](std::vector<std::string> events) {
    if (events.empty()) return;
    if (!st->committed) {
      st->committed = true;
      self->send(st->request, att_head_atom::value, st->status, st->headers);
    }
    for (auto& e : events) self->send(st->request, att_event_atom::value, std::move(e));
    arm_idle();
  };

  auto on_head = [st, stream = spec.stream](int status, net::header_list& headers) {
    st->status = status;
    st->headers = std::move(headers);
    st->streaming = relayed_as_stream(stream, status, st->headers);
  };

  // A body that is not relayed as a stream is held to max_response_bytes before it gets here
  // (relay_events, on the io thread).
  auto on_body = [st, relay_events, fail](std::string& bytes) {
    if (st->done) return;
    if (st->streaming) {
      auto events = st->framer.feed(bytes);
      if (st->framer.overflowed()) {
        fail(attempt_end::malformed, "upstream sent an SSE event larger than 1 MiB");
        return;
      }
      relay_events(std::move(events));
      return;
    }
    if (st->body.empty()) {
      st->body = std::move(bytes);
    } else {
      st->body += bytes;
    }
  };

  auto on_end = [self, st, relay_events, fail, finish] {
    if (st->done) return;
    if (st->streaming) {
      // An unterminated tail is not a whole event; it is dropped rather than cut into.
      relay_events(st->framer.finish());
      if (!st->committed && st->framer.has_partial()) {
        fail(attempt_end::malformed, "upstream stream ended inside its first event");
        return;
      }
      if (!st->committed) {
        // A 2xx stream with an empty body: nothing was relayed, so it is an ordinary answer.
        st->done = true;
        self->send(st->request, att_result_atom::value, st->status, std::move(st->headers),
                   std::string{});
        finish();
        return;
      }
      st->done = true;
      self->send(st->request, att_end_atom::value);
      finish();
      return;
    }
    st->done = true;
    // The head and body go with the answer (copying the head cost three allocations).
    self->send(st->request, att_result_atom::value, st->status, std::move(st->headers),
               std::move(st->body));
    finish();
  };

  // Counted before it exists: the request, which outlives this actor, then waits for its
  // work_ended whatever happens next.
  if (spec.connections) spec.connections->fetch_add(1);
  // The per-try clock starts once the attempt may use the upstream (the connection arms it at
  // the grant); queue wait is bounded by the queue limit and the request deadline instead.
  spec.connection.attempt_timeout = spec.timeout;
  st->connection = self->spawn<caf::linked>(connection_actor, rt, caf::actor_cast<caf::actor>(self),
                                            st->request, std::move(spec.connection));

  return {
      [owner, on_head](up_head_atom, int status, net::header_list& headers) {
        on_head(status, headers);
      },
      [on_body](up_body_atom, std::string& bytes) { on_body(bytes); },
      [on_end](up_end_atom) { on_end(); },
      // A response that was not an event stream, held by net/'s relay until it was complete:
      // one message instead of head, body and end (connection_actor.cpp).
      [on_head, on_body, on_end](up_whole_atom, int status, net::header_list& headers,
                                 std::string& body) {
        on_head(status, headers);
        if (!body.empty()) on_body(body);
        on_end();
      },
      [fail](up_fail_atom, std::int32_t kind, std::string& message) {
        fail(failure_kind(kind), std::move(message));
      },
      [st, fail](attempt_timeout_atom) {
        if (st->committed) return;
        fail(attempt_end::timeout, "attempt timed out");
      },
      [st, fail](idle_timeout_atom, std::uint64_t generation) {
        if (generation != st->idle_generation || !st->committed) return;
        fail(attempt_end::timeout, "stream idle timeout");
      },
  };
}

}  // namespace tether
