#include "actors/connection_actor.hpp"

#include "actors/messages.hpp"
#include "actors/relay_events.hpp"

namespace tether {
namespace {

struct connection_state {
  std::shared_ptr<net::upstream_exchange> exchange;
  bool answered = false;  // the budget's first answer decides; a later one is a duplicate
  bool granted = false;
  bool closing = false;
  bool closed = false;
  std::int64_t asked_ns = 0;
  std::int64_t queue_wait_ns = 0;  // asked → the budget's answer; 0 if none came
};

}  // namespace

caf::behavior connection_actor(caf::event_based_actor* self, runtime_ptr rt, caf::actor attempt,
                               caf::actor request, connection_spec spec) {
  auto st = std::make_shared<connection_state>();
  auto upstream = spec.upstream;
  auto hub = spec.hub;
  auto affinity = spec.affinity;
  const auto max_response_bytes = spec.max_response_bytes;
  const auto stream = spec.stream;

  // The socket's end is this actor's end: report it, then exit, which frees the budget slot.
  auto finish = [self, st, request, upstream](std::int64_t closed_ns) {
    if (st->closed) return;
    st->closed = true;
    self->send(request, work_ended_atom::value, static_cast<std::uint64_t>(upstream), closed_ns,
               st->granted, st->queue_wait_ns);
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

  // Backstop: however this actor ends (an exception, an unexpected kill), the socket closes.
  self->attach_functor([st](const caf::error&) {
    if (st->exchange && !st->closed) st->exchange->cancel();
  });

  st->asked_ns = now_ns();
  self->send(rt->budget, acquire_atom::value, static_cast<std::uint64_t>(spec.upstream), spec.key,
             spec.priority);

  auto request_to_send = std::make_shared<net::upstream_request>(std::move(spec.request));

  return {
      [self, rt, st, attempt, request_to_send, upstream, hub, affinity, stream, max_response_bytes,
       finish](grant_atom, bool granted, const std::string& reason) {
        // A second answer comes only when a lost budget host's claims were re-asked locally
        // (budget_link_actor); the local budget counts this actor either way.
        if (st->closing || st->closed || st->answered) return;
        st->answered = true;
        st->queue_wait_ns = now_ns() - st->asked_ns;
        self->send(attempt, queued_atom::value, st->queue_wait_ns);
        if (!granted) {
          self->send(attempt, up_fail_atom::value, up_fail_overloaded, reason);
          finish(now_ns());
          return;
        }
        st->granted = true;
        auto events = std::make_shared<relay_events>(caf::actor_cast<caf::actor>(self), attempt,
                                                     stream, max_response_bytes);
        st->exchange =
            rt->upstreams[upstream]->start(std::move(*request_to_send), events, affinity);
        events->attach(st->exchange);
        // The caller may have left while this waited for its slot: then the hub cancels it now.
        if (hub) hub->add(st->exchange);
      },
      [finish](up_closed_atom, std::int64_t closed_ns) { finish(closed_ns); },
  };
}

}  // namespace tether
