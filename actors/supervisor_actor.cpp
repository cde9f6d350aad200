#include "actors/supervisor_actor.hpp"

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "actors/messages.hpp"

namespace tether {
namespace {

// How many requests one cell adopts before a new cell takes over. CAF keeps an actor's links in
// a list, and a request's end unlinks it from the actor it was linked to by a scan of that list:
// linked to one actor per thread, each end scanned every live request of the thread, a cost that
// grew with the callers. A cell's list holds at most this many.
constexpr std::size_t cell_capacity = 32;

// io thread → cell: no more adoptions; end once the last request has.
using cell_full_atom = caf::atom_constant<caf::atom("cell_full")>;
// cell → supervisor, while draining: the thread's last live request has ended.
using cell_idle_atom = caf::atom_constant<caf::atom("cell_idle")>;

// What the supervisor and its cells count together.
struct supervisor_counts {
  std::atomic<std::uint64_t> live{0};  // adopted and not yet ended, in every cell
};

struct cell_state {
  // Strong handles: CAF 0.17 collects an actor nobody holds a strong reference to at once. The
  // io thread inserts while the cell erases.
  std::mutex mtx;
  std::unordered_map<caf::actor_id, caf::actor> live;
  std::size_t adopted = 0;  // under the supervisor's lock
};

// Linked to up to cell_capacity requests and to its supervisor: the supervisor's end (the
// shutdown) reaches the requests through it, and each request's end reaches it.
class supervisor_cell : public caf::event_based_actor {
 public:
  supervisor_cell(caf::actor_config& cfg, caf::actor_addr parent, std::shared_ptr<cell_state> st,
                  std::shared_ptr<supervisor_counts> counts, bool draining)
      : caf::event_based_actor(cfg),
        parent_(std::move(parent)),
        st_(std::move(st)),
        counts_(std::move(counts)),
        draining_(draining) {}

  caf::behavior make_behavior() override {
    set_exit_handler([this](caf::exit_msg& msg) {
      if (msg.source == parent_ || msg.source == address()) {
        quit(msg.reason);
        return;
      }
      ended(msg.source);
    });
    set_down_handler([this](caf::down_msg& msg) { ended(msg.source); });
    return {
        [this](cell_full_atom) {
          full_ = true;
          end_if_done();
        },
        [this](drain_atom) {
          draining_ = true;
          report_if_idle();
        },
        [this](drain_now_atom) { cancel_all(); },
    };
  }

 private:
  // A request's end comes through its link, or, once it has been cancelled, through the monitor
  // (an exit_msg delivered to it dissolves the link); never both, but a request that ended as it
  // was cancelled may send both, and only the first counts.
  void ended(const caf::actor_addr& who) {
    bool empty = false;
    {
      std::lock_guard<std::mutex> g(st_->mtx);
      if (st_->live.erase(who.id()) == 0) return;
      empty = st_->live.empty();
    }
    counts_->live.fetch_sub(1);
    report_if_idle();
    if (empty) end_if_done();
  }

  void report_if_idle() {
    if (draining_ && counts_->live.load() == 0)
      send(caf::actor_cast<caf::actor>(parent_), cell_idle_atom::value);
  }

  void end_if_done() {
    if (!full_) return;
    std::lock_guard<std::mutex> g(st_->mtx);
    if (st_->live.empty()) quit();
  }

  // Each request's tree goes down with the drain reason: the request answers its caller (503, or
  // an error event mid-stream) and lives on until its sockets are closed.
  void cancel_all() {
    if (cancelling_) return;
    cancelling_ = true;
    std::lock_guard<std::mutex> g(st_->mtx);
    for (auto& [id, req] : st_->live) {
      monitor(req);
      send_exit(req, stop_error(stop_reason::drain));
    }
  }

  caf::actor_addr parent_;
  std::shared_ptr<cell_state> st_;
  std::shared_ptr<supervisor_counts> counts_;
  bool draining_;
  bool full_ = false;
  bool cancelling_ = false;
};

}  // namespace

struct supervisor_state {
  caf::event_based_actor* self = nullptr;
  std::shared_ptr<supervisor_counts> counts = std::make_shared<supervisor_counts>();
  // The io thread adopts (and spawns cells) while this actor drains.
  std::mutex mtx;
  std::unordered_map<caf::actor_id, caf::actor> cells;  // every cell not yet ended, linked
  caf::actor current;                                   // the cell that adopts now
  std::shared_ptr<cell_state> current_state;
  bool draining = false;  // a cell spawned during the drain is told at its spawn
  bool cancelling = false;
  std::uint64_t cut_short = 0;  // live when the drain's end came
  std::vector<caf::response_promise> waiting;

  void adopt(caf::actor req);
  void cell_ended(const caf::actor_addr& cell);
  void start_drain();
  void cancel_all();
  void settle();
};

// Held before it is linked: a request that has already ended makes the link send its exit to the
// cell at once, and that exit must find it there to take it out.
void supervisor_state::adopt(caf::actor req) {
  std::lock_guard<std::mutex> g(mtx);
  if (!current || current_state->adopted == cell_capacity) {
    if (current) caf::anon_send(current, cell_full_atom::value);
    current_state = std::make_shared<cell_state>();
    current = self->home_system().spawn<supervisor_cell>(self->address(), current_state, counts,
                                                         draining);
    cells.emplace(current.id(), current);
    self->link_to(current);
  }
  ++current_state->adopted;
  counts->live.fetch_add(1);
  {
    std::lock_guard<std::mutex> c(current_state->mtx);
    current_state->live.emplace(req.id(), req);
  }
  caf::actor_cast<caf::abstract_actor*>(current)->add_link(
      caf::actor_cast<caf::abstract_actor*>(req));
}

void supervisor_state::cell_ended(const caf::actor_addr& cell) {
  std::lock_guard<std::mutex> g(mtx);
  cells.erase(cell.id());
}

void supervisor_state::start_drain() {
  waiting.push_back(self->make_response_promise());
  {
    std::lock_guard<std::mutex> g(mtx);
    if (!draining) {
      draining = true;
      for (const auto& [id, cell] : cells) self->send(cell, drain_atom::value);
    }
  }
  settle();
}

void supervisor_state::cancel_all() {
  if (cancelling) return;
  cancelling = true;
  cut_short = counts->live.load();
  std::lock_guard<std::mutex> g(mtx);
  for (const auto& [id, cell] : cells) self->send(cell, drain_now_atom::value);
}

void supervisor_state::settle() {
  if (!draining || counts->live.load() != 0) return;
  for (auto& rp : waiting) rp.deliver(drained_atom::value, cut_short);
  waiting.clear();
}

supervisor_actor::supervisor_actor(caf::actor_config& cfg)
    : caf::event_based_actor(cfg), st_(std::make_shared<supervisor_state>()) {
  st_->self = this;
}

void supervisor_actor::adopt(caf::actor req) {
  st_->adopt(std::move(req));
}

std::uint64_t supervisor_actor::live() const {
  return st_->counts->live.load();
}

void adopt_request(const caf::actor& supervisor, caf::actor req) {
  static_cast<supervisor_actor*>(caf::actor_cast<caf::abstract_actor*>(supervisor))
      ->adopt(std::move(req));
}

std::uint64_t live_requests(const caf::actor& supervisor) {
  return static_cast<supervisor_actor*>(caf::actor_cast<caf::abstract_actor*>(supervisor))->live();
}

caf::behavior supervisor_actor::make_behavior() {
  auto st = st_;
  // A cell's end arrives through its link. The shutdown's anon_send_exit names this actor itself
  // as the source: that one is this actor's own end, which the links carry to the cells and from
  // them to the requests.
  set_exit_handler([this, st](caf::exit_msg& msg) {
    if (msg.source == address()) {
      quit(msg.reason);
      return;
    }
    st->cell_ended(msg.source);
  });

  return {
      [st](drain_atom) { st->start_drain(); },
      [st](drain_now_atom) { st->cancel_all(); },
      [st](cell_idle_atom) { st->settle(); },
  };
}

}  // namespace tether
