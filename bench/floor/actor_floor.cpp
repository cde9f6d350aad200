// tether-actor-floor: what the actor tree alone costs per request, with none of tether's work in
// it — no sockets, no parsing, no JSON, no logging. Each request is the tree tether builds, with
// the messages tether's actors exchange in a non-streamed request's life, reduced to signals:
//   the supervisor spawns a request actor and monitors it;
//   the request actor spawns an attempt actor, linked; the attempt spawns a connection actor,
//   linked; the connection asks the budget actor for a slot (the budget monitors it) and is
//   granted it; it reports the response to the attempt, which reports to the request actor;
//   the request actor exits, its link takes the attempt and the connection down; the budget
//   frees the slot on the connection's down message, the supervisor starts the next request on
//   the request actor's.
// It runs on tether's scheduler with the io lent to the first worker, as the gateway does.
//
// Usage: tether-actor-floor N — runs N requests one after the other and prints the time taken.
// The instructions per request are the figure to use (this VM's clock is too noisy for the
// time): bench/callgrind.sh --floor counts them, as (total(N) − total(0)) / N, to set against
// the gateway's own count per request.
#include <caf/all.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>

#include "actors/scheduler.hpp"
#include "net/io_runtime.hpp"

namespace {

using acquire_atom = caf::atom_constant<caf::atom("acquire")>;
using grant_atom = caf::atom_constant<caf::atom("grant")>;
using response_atom = caf::atom_constant<caf::atom("response")>;
using next_atom = caf::atom_constant<caf::atom("next")>;

caf::behavior budget(caf::event_based_actor* self, int /*unused: CAF 0.17 spawns an
                                                        argument-less function through a null
                                                        tuple, which UBSan flags*/) {
  auto held = std::make_shared<long>(0);
  self->set_down_handler([held](const caf::down_msg&) { --*held; });
  return {
      [self, held](acquire_atom, const caf::actor& who) {
        ++*held;
        self->monitor(who);
        self->send(who, grant_atom::value);
      },
  };
}

// Class-based, as tether's are: an actor's state in its object, its arguments in no heap tuple.
class connection final : public caf::event_based_actor {
 public:
  connection(caf::actor_config& cfg, caf::actor attempt, caf::actor slots)
      : caf::event_based_actor(cfg), attempt_(std::move(attempt)), slots_(std::move(slots)) {}
  caf::behavior make_behavior() override {
    send(slots_, acquire_atom::value, caf::actor_cast<caf::actor>(this));
    return {[this](grant_atom) { send(attempt_, response_atom::value); }};
  }

 private:
  caf::actor attempt_;
  caf::actor slots_;
};

class attempt final : public caf::event_based_actor {
 public:
  attempt(caf::actor_config& cfg, caf::actor request, caf::actor slots)
      : caf::event_based_actor(cfg), request_(std::move(request)), slots_(std::move(slots)) {}
  caf::behavior make_behavior() override {
    spawn<connection, caf::linked>(caf::actor_cast<caf::actor>(this), std::move(slots_));
    return {[this](response_atom) { send(request_, response_atom::value); }};
  }

 private:
  caf::actor request_;
  caf::actor slots_;
};

class request final : public caf::event_based_actor {
 public:
  request(caf::actor_config& cfg, caf::actor slots)
      : caf::event_based_actor(cfg), slots_(std::move(slots)) {}
  caf::behavior make_behavior() override {
    spawn<attempt, caf::linked>(caf::actor_cast<caf::actor>(this), std::move(slots_));
    return {[this](response_atom) { quit(caf::exit_reason::user_shutdown); }};
  }

 private:
  caf::actor slots_;
};

caf::behavior supervisor(caf::event_based_actor* self, caf::actor slots, long count,
                         std::promise<void>* done) {
  auto left = std::make_shared<long>(count);
  self->set_down_handler([self, left, done](const caf::down_msg&) {
    if (--*left > 0) {
      self->send(self, next_atom::value);
    } else {
      done->set_value();
      self->quit();
    }
  });
  if (count > 0) self->send(self, next_atom::value);
  return {
      [self, slots](next_atom) { self->monitor(self->spawn<request>(slots)); },
  };
}

}  // namespace

int main(int argc, char** argv) {
  const long count = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 10000;
  tether::net::io_runtime io{tether::net::io_runtime::lent_thread};
  caf::actor_system_config cfg;
  tether::use_tether_scheduler(cfg, &io);
  cfg.set("scheduler.max-threads", std::size_t{1});
  cfg.set("logger.verbosity", caf::atom("quiet"));
  {
    caf::actor_system system{cfg};
    auto slots = system.spawn(budget, 0);
    std::promise<void> done;
    const auto start = std::chrono::steady_clock::now();
    if (count > 0) {
      // Held until the end: an actor nobody holds a handle to is terminated as unreachable.
      auto driver = system.spawn(supervisor, slots, count, &done);
      done.get_future().wait();
    }
    const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
    std::printf("%ld requests, %.2f us each\n", count, count > 0 ? took.count() / count : 0.0);
    caf::anon_send_exit(slots, caf::exit_reason::user_shutdown);
    io.join();
  }
  return 0;
}
