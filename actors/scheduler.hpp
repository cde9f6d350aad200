#pragma once
// tether's CAF scheduler: CAF's work-stealing coordinator with a clock that is not woken when an
// actor that never set a timeout exits, and job queues that allocate nothing per job (why:
// scheduler.cpp).
#include <caf/actor_system_config.hpp>

namespace tether {

// Makes every actor system created from `cfg` use tether's scheduler.
void use_tether_scheduler(caf::actor_system_config& cfg);

}  // namespace tether
