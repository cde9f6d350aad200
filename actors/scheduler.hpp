#pragma once
// tether's CAF scheduler: CAF's work-stealing coordinator with a clock that is not woken when an
// actor that never set a timeout exits, and job queues that allocate nothing per job (why:
// scheduler.cpp).
#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <vector>

namespace tether {
namespace net {
class io_runtime;
}

// Makes every actor system created from `cfg` use tether's scheduler. Worker k runs the k-th of
// `ios` (each constructed with io_runtime::lent_thread) and its jobs run in that context's
// handlers; each must outlive the actor system and be stopped before it is destroyed. Give the
// system at least as many workers as ios (scheduler.max-threads).
void use_tether_scheduler(caf::actor_system_config& cfg, std::vector<net::io_runtime*> ios);
// An actor that serves every io thread (the budget, the supervisor) runs on the thread that wakes
// it rather than returning to a home worker, as a request's actors do: it is asked by all and
// its answer goes to the asker's home anyway, so a home would only add hops. Call right after
// spawning; false when `system` does not run tether's scheduler or the table is full.
bool roam(caf::actor_system& system, const caf::actor& actor);
// While one lives, an actor that a message sent on this thread wakes, and that lives on this
// thread's io worker, is queued ahead of the jobs already waiting there, behind the urgent ones
// queued before it. A timer's news is sent so (actor_timers): when many deadlines pass together,
// each 504 goes out before the teardowns of the requests whose deadline passed a moment earlier,
// instead of behind them.
class urgent_delivery {
 public:
  urgent_delivery();
  ~urgent_delivery();
  urgent_delivery(const urgent_delivery&) = delete;
  urgent_delivery& operator=(const urgent_delivery&) = delete;

 private:
  bool was_;
};

// One lent io (or none: nullptr), for the first worker.
void use_tether_scheduler(caf::actor_system_config& cfg, net::io_runtime* io = nullptr);

}  // namespace tether
