// The actor tests' one fixture: an actor system under CAF's test coordinator, where a message is
// delivered only when the test runs the scheduler (and CAF's own request timeouts fire only when
// it advances the coordinator's clock), so each race is set up message by message, without
// wall-clock slack.
#pragma once

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <gtest/gtest.h>

namespace tether {

// What a test's actors use by reference (a clock, the metrics) must outlive them, and so the
// actor system, which ends last: it goes in a base class listed before this one (bases are
// destroyed in the reverse order of their listing, after the test's own members), as
// drain_actor_test.cpp and budget_shard_actor_test.cpp do.
class coordinator_fixture : public ::testing::Test {
 protected:
  coordinator_fixture()
      : system_(cfg_.set("scheduler.policy", caf::atom("testing"))),
        sched_(dynamic_cast<caf::scheduler::test_coordinator&>(system_.scheduler())) {}

  // Delivers every message there is, in order.
  void run() { sched_.run(); }

  caf::actor_system_config cfg_;
  caf::actor_system system_;
  caf::scheduler::test_coordinator& sched_;
};

}  // namespace tether
