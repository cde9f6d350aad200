#include "actors/connection_actor.hpp"

#include "actors/messages.hpp"
#include "actors/relay_events.hpp"

#include <optional>

namespace tether {
namespace {

struct connection_state {
  std::shared_ptr<net::upstream_exchange> exchange;
  bool answered = false;  // the budget's first answer decides; a later one is a duplicate
  bool granted = false;
  bool closing = false;
  bool closed = false;
  std::optional<std::int64_t> closed_ns;
  std::int64_t asked_ns = 0;
  std::int64_t queue_wait_ns = 0;  // asked → the budget's answer, or → the end if none came
  net::upstream_request request;   // sent at the grant
};

}  // namespace

caf::behavior connection_actor(caf::event_based_actor* self, runtime_ptr rt, caf::actor attempt,
                               caf::actor request, connection_spec spec) {
  auto st = std::make_shared<connection_state>();
  auto upstream = spec.upstream;
  auto affinity = spec.affinity;
  const auto max_response_bytes = spec.max_response_bytes;
  const auto stream = spec.stream;

  // The socket's end is this actor's end: the exit frees the budget slot (the budget's monitor)
  // and reports the work's end to the request (the functor attached below).
  auto finish = [self, st](std::int64_t closed_ns) {
    if (st->closed) return;
    st->closed = true;
    // Ended while still queued (the tree was cancelled): the whole wait was queue wait.
    if (!st->answered) st->queue_wait_ns = closed_ns - st->asked_ns;
    st->closed_ns = closed_ns;
    self->quit();
  };

  auto cancel = [st, finish] {
    if (st->closing || st->closed) return;
    st->closing = true;
    if (st->exchange) {
      st->exchange->cancel();  // net answers with on_closed once the socket is closed
    } else {
      finish(now_ns());  // still queued or never started: nothing to close
    }
  };

  // Whatever the parent's reason, the work stops; the close is awaited, not assumed.
  self->set_exit_handler([cancel](caf::exit_msg& msg) {
    if (msg.reason == caf::exit_reason::normal) return;
    cancel();
  });

  // However this actor ends (normally, an exception, an unexpected kill), the socket closes and
  // the request hears of the end: it waits for one work_ended per connection its attempts
  // started, so the report is sent from here rather than before a quit that may not be reached.
  // (One message instead of the report plus the down_msg of a monitor.)
  self->attach_functor([st, request, upstream, index = spec.attempt_index](const caf::error&) {
    if (st->exchange && !st->closed) st->exchange->cancel();
    const auto ended_ns = st->closed_ns.value_or(now_ns());
    if (!st->answered) st->queue_wait_ns = ended_ns - st->asked_ns;
    caf::anon_send(request, work_ended_atom::value, static_cast<std::uint64_t>(upstream), index,
                   ended_ns, st->granted, st->queue_wait_ns);
  });

  st->asked_ns = now_ns();
  self->send(rt->budget, acquire_atom::value, static_cast<std::uint64_t>(spec.upstream), spec.key,
             spec.priority);

  st->request = std::move(spec.request);
  const bool tell_grant = spec.tell_grant;

  return {
      [self, rt, st, attempt, upstream, affinity, stream, max_response_bytes, tell_grant, finish](
          grant_atom, bool granted, const std::string& reason) {
        // A second answer comes only when a lost budget host's claims were re-asked locally
        // (budget_link_actor); the local budget counts this actor either way.
        if (st->closing || st->closed || st->answered) return;
        st->answered = true;
        st->queue_wait_ns = now_ns() - st->asked_ns;
        if (!granted) {
          self->send(attempt, up_fail_atom::value, up_fail_overloaded, reason);
          finish(now_ns());
          return;
        }
        st->granted = true;
        if (tell_grant) self->send(attempt, granted_atom::value);
        auto events = std::make_shared<relay_events>(caf::actor_cast<caf::actor>(self), attempt,
                                                     stream, max_response_bytes);
        st->exchange = rt->upstreams[upstream]->start(std::move(st->request), events, affinity);
        events->attach(st->exchange);
      },
      [finish](up_closed_atom, std::int64_t closed_ns) { finish(closed_ns); },
  };
}

}  // namespace tether
