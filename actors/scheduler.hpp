#pragma once
// tether's CAF scheduler: CAF's work-stealing coordinator with a clock that is not woken when an
// actor that never set a timeout exits, and job queues that allocate nothing per job (why:
// scheduler.cpp).
#include <caf/actor_system_config.hpp>

namespace tether {
namespace net {
class io_runtime;
}

// Makes every actor system created from `cfg` use tether's scheduler. With `io` (constructed
// with io_runtime::lent_thread), the first worker runs io's context and its jobs run in that
// context's handlers; io must outlive the actor system, and must be stopped before the actor
// system is destroyed.
void use_tether_scheduler(caf::actor_system_config& cfg, net::io_runtime* io = nullptr);

}  // namespace tether
