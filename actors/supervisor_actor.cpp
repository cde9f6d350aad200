#include "actors/supervisor_actor.hpp"

#include <mutex>
#include <unordered_map>
#include <vector>

#include "actors/messages.hpp"

namespace tether {

struct supervisor_state {
  caf::event_based_actor* self = nullptr;
  // Strong handles: CAF 0.17 collects an actor nobody holds a strong reference to at once. Keyed
  // by the actor's id (every request actor is local): one insert and one erase per request. The
  // io thread inserts (adopt_request) while this actor erases, so `live` alone has a lock.
  std::mutex mtx;
  std::unordered_map<caf::actor_id, caf::actor> live;
  bool draining = false;
  bool cancelling = false;
  std::uint64_t cancelled = 0;
  std::vector<caf::response_promise> waiting;

  void adopt(caf::actor req);
  void ended(const caf::actor_addr& who);
  void start_drain();
  void cancel_all();
  void settle();
};

// Held before it is linked: a request that has already ended makes the link send its exit at
// once, and that exit must find it here to take it out.
void supervisor_state::adopt(caf::actor req) {
  {
    std::lock_guard<std::mutex> g(mtx);
    live.emplace(req.id(), req);
  }
  self->link_to(req);
}

void supervisor_state::ended(const caf::actor_addr& who) {
  {
    std::lock_guard<std::mutex> g(mtx);
    live.erase(who.id());
  }
  settle();
}

void supervisor_state::start_drain() {
  waiting.push_back(self->make_response_promise());
  draining = true;
  settle();
}

// Each request's tree goes down with the drain reason: the request answers its caller (503, or
// an error event mid-stream) and lives on until its sockets are closed. Delivering an exit_msg
// dissolves the link, so its end is learnt from a monitor from here on.
void supervisor_state::cancel_all() {
  if (cancelling) return;
  cancelling = true;
  std::lock_guard<std::mutex> g(mtx);
  for (auto& [id, req] : live) {
    ++cancelled;
    self->monitor(req);
    self->send_exit(req, stop_error(stop_reason::drain));
  }
}

void supervisor_state::settle() {
  if (!draining) return;
  {
    std::lock_guard<std::mutex> g(mtx);
    if (!live.empty()) return;
  }
  for (auto& rp : waiting) rp.deliver(drained_atom::value, cancelled);
  waiting.clear();
}

supervisor_actor::supervisor_actor(caf::actor_config& cfg)
    : caf::event_based_actor(cfg), st_(std::make_shared<supervisor_state>()) {
  st_->self = this;
}

void supervisor_actor::adopt(caf::actor req) {
  st_->adopt(std::move(req));
}

void adopt_request(const caf::actor& supervisor, caf::actor req) {
  static_cast<supervisor_actor*>(caf::actor_cast<caf::abstract_actor*>(supervisor))
      ->adopt(std::move(req));
}

caf::behavior supervisor_actor::make_behavior() {
  auto st = st_;
  // A request's end arrives through its link (any reason: this actor outlives its requests),
  // or, once it has been cancelled, through the monitor. The shutdown's anon_send_exit names
  // this actor itself as the source: that one is this actor's own end.
  set_exit_handler([this, st](caf::exit_msg& msg) {
    if (msg.source == address()) {
      quit(msg.reason);
      return;
    }
    st->ended(msg.source);
  });
  set_down_handler([st](caf::down_msg& msg) { st->ended(msg.source); });

  return {
      [st](drain_atom) { st->start_drain(); },
      [st](drain_now_atom) { st->cancel_all(); },
  };
}

}  // namespace tether
