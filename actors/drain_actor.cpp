#include "actors/drain_actor.hpp"

#include <optional>

#include "actors/actor_timers.hpp"
#include "actors/messages.hpp"
#include "actors/supervisor_actor.hpp"

namespace tether {
namespace {

struct drain_state {
  caf::event_based_actor* self = nullptr;
  std::chrono::milliseconds drain_timeout{0};
  std::vector<caf::actor> budgets;
  std::vector<caf::actor> supervisors;
  bool draining = false;
  bool ended = false;
  std::size_t pending = 0;      // supervisors that have not answered the drain yet
  std::uint64_t cut_short = 0;  // requests alive when the drain's end came, on every thread
  std::vector<caf::response_promise> waiting;
  std::optional<actor_timers> timers;

  void start();
  void end_now();
  void settle();
};

void drain_state::start() {
  waiting.push_back(self->make_response_promise());
  if (draining) {
    settle();
    return;
  }
  draining = true;
  pending = supervisors.size();
  for (const auto& s : supervisors) {
    self->request(s, caf::infinite, drain_atom::value)
        .then(
            [this](drained_atom, std::uint64_t) {
              --pending;
              settle();
            },
            [this](caf::error&) {
              --pending;
              settle();
            });
  }
  if (pending > 0) timers->after(drain_timeout, drain_now_atom::value);
  settle();
}

// Every budget hears of the drain's end before any tree is stopped, and all of them from this one
// actor: a slot a stopping tree frees on one thread cannot start the queued request of another
// thread whose shard has not yet been told (each actor's mailbox keeps the order of causes).
void drain_state::end_now() {
  // After every tree has ended (the timeout's message may still come), there is nothing to end.
  if (ended || (draining && pending == 0)) return;
  ended = true;
  // Counted here, before the budgets are told: a queued request their refusal ends would be gone
  // by the time its supervisor is told, and the supervisors' own counts would miss it.
  for (const auto& s : supervisors) cut_short += live_requests(s);
  for (const auto& b : budgets) self->send(b, drain_now_atom::value);
  for (const auto& s : supervisors) self->send(s, drain_now_atom::value);
}

void drain_state::settle() {
  if (!draining || pending > 0) return;
  for (auto& rp : waiting) rp.deliver(drained_atom::value, cut_short);
  waiting.clear();
}

}  // namespace

caf::behavior drain_actor(caf::event_based_actor* self, std::chrono::milliseconds drain_timeout,
                          std::vector<caf::actor> budgets, std::vector<caf::actor> supervisors,
                          net::timer_service* timers) {
  auto st = std::make_shared<drain_state>();
  st->self = self;
  st->drain_timeout = drain_timeout;
  st->budgets = std::move(budgets);
  st->supervisors = std::move(supervisors);
  st->timers.emplace(timers, self->address());
  return {
      [st](drain_atom) { st->start(); },
      [st](drain_now_atom) { st->end_now(); },
  };
}

}  // namespace tether
