#include "actors/supervisor_actor.hpp"

#include <map>

#include "actors/messages.hpp"

namespace tether {
namespace {

struct supervisor_state {
  // Strong handles: CAF 0.17 collects an actor nobody holds a strong reference to at once.
  std::map<caf::actor_addr, caf::actor> live;
  bool draining = false;
  std::uint64_t cancelled = 0;
  std::vector<caf::response_promise> waiting;
};

}  // namespace

caf::behavior supervisor_actor(caf::event_based_actor* self,
                               std::chrono::milliseconds drain_timeout) {
  auto st = std::make_shared<supervisor_state>();

  auto settle = [st] {
    if (!st->draining || !st->live.empty()) return;
    for (auto& rp : st->waiting) rp.deliver(drained_atom::value, st->cancelled);
    st->waiting.clear();
  };

  self->set_down_handler([st, settle](caf::down_msg& msg) {
    st->live.erase(msg.source);
    settle();
  });

  return {
      [self, st](adopt_atom, caf::actor req) {
        self->monitor(req);
        st->live.emplace(req.address(), std::move(req));
      },
      [self, st, settle, drain_timeout](drain_atom) {
        st->waiting.push_back(self->make_response_promise());
        if (!st->draining) {
          st->draining = true;
          if (!st->live.empty()) self->delayed_send(self, drain_timeout, drain_cancel_atom::value);
        }
        settle();
      },
      [self, st](drain_cancel_atom) {
        for (auto& [addr, req] : st->live) {
          ++st->cancelled;
          self->send(req, drain_cancel_atom::value);
        }
      },
  };
}

}  // namespace tether
