#include "actors/connection_actor.hpp"

#include "actors/messages.hpp"
#include "actors/policy/slot_refusal.hpp"
#include "actors/relay_events.hpp"

#include <optional>

namespace tether {
namespace {

struct connection_state {
  caf::event_based_actor* self = nullptr;
  runtime_ptr rt;
  caf::actor attempt;
  connection_spec spec;
  std::shared_ptr<net::upstream_exchange> exchange;
  bool answered = false;  // the budget's first answer decides; a later one is a duplicate
  bool granted = false;
  bool closing = false;
  bool closed = false;
  std::optional<std::int64_t> closed_ns;
  std::int64_t asked_ns = 0;
  std::int64_t queue_wait_ns = 0;  // asked → the budget's answer, or → the end if none came

  void ask_for_slot();
  void budget_answered(slot_refusal refusal, const std::string& reason);
  void cancel();
  void finish(std::int64_t at_ns);
};

void connection_state::ask_for_slot() {
  asked_ns = now_ns();
  self->send(spec.budget ? spec.budget : rt->budget, acquire_atom::value,
             static_cast<std::uint64_t>(spec.upstream), spec.key, spec.rank, spec.tokens);
}

// The exchange starts only with a slot: no socket is opened for work the budget has not counted.
void connection_state::budget_answered(slot_refusal refusal, const std::string& reason) {
  // A second answer comes only when a lost budget host's claims were re-asked locally
  // (budget_link_actor); the local budget counts this actor either way.
  if (closing || closed || answered) return;
  answered = true;
  queue_wait_ns = now_ns() - asked_ns;
  if (refusal != slot_refusal::none) {
    self->send(attempt, up_fail_atom::value,
               refusal == slot_refusal::stopping ? up_fail_shutting_down : up_fail_overloaded,
               reason);
    finish(now_ns());
    return;
  }
  granted = true;
  if (spec.tell_grant) self->send(attempt, granted_atom::value);
  auto events = std::make_shared<relay_events>(caf::actor_cast<caf::actor>(self), attempt,
                                               spec.stream, spec.max_response_bytes);
  exchange = rt->upstreams[spec.upstream]->start(std::move(spec.request), events, spec.affinity);
  events->attach(exchange);
}

void connection_state::cancel() {
  if (closing || closed) return;
  closing = true;
  if (exchange) {
    exchange->cancel();  // net answers with on_closed once the socket is closed
  } else {
    finish(now_ns());  // still queued or never started: nothing to close
  }
}

// The socket's end is this actor's end: the exit frees the budget slot (the budget's monitor)
// and reports the work's end to the request (the functor attached in connection_actor).
void connection_state::finish(std::int64_t at_ns) {
  if (closed) return;
  closed = true;
  // Ended while still queued (the tree was cancelled): the whole wait was queue wait.
  if (!answered) queue_wait_ns = at_ns - asked_ns;
  closed_ns = at_ns;
  self->quit();
}

}  // namespace

caf::behavior connection_actor(caf::event_based_actor* self, runtime_ptr rt, caf::actor attempt,
                               caf::actor request, connection_spec spec) {
  auto st = std::make_shared<connection_state>();
  st->self = self;
  st->rt = std::move(rt);
  st->attempt = std::move(attempt);
  st->spec = std::move(spec);

  // Whatever the parent's reason, the work stops; the close is awaited, not assumed.
  self->set_exit_handler([st](caf::exit_msg& msg) {
    if (msg.reason != caf::exit_reason::normal) st->cancel();
  });

  // However this actor ends (normally, an exception, an unexpected kill), the socket closes and
  // the request hears of the end: it waits for one work_ended per connection its attempts
  // started, so the report is sent from here rather than before a quit that may not be reached.
  // (One message instead of the report plus the down_msg of a monitor.)
  self->attach_functor([st, request = std::move(request)](const caf::error&) {
    if (st->exchange && !st->closed) st->exchange->cancel();
    const auto ended_ns = st->closed_ns.value_or(now_ns());
    if (!st->answered) st->queue_wait_ns = ended_ns - st->asked_ns;
    caf::anon_send(request, work_ended_atom::value, static_cast<std::uint64_t>(st->spec.upstream),
                   st->spec.attempt_index, ended_ns, st->granted, st->queue_wait_ns);
  });

  st->ask_for_slot();
  return {
      [st](grant_atom, std::int32_t refusal, const std::string& reason) {
        st->budget_answered(static_cast<slot_refusal>(refusal), reason);
      },
      [st](up_closed_atom, std::int64_t closed_ns) { st->finish(closed_ns); },
  };
}

}  // namespace tether
