// An io thread's supervisor under CAF's test coordinator: every message is delivered when the
// test says, so the drain's races are tested without wall-clock slack. (The drain's clock and the
// budgets' order are the drain actor's: drain_actor_test.cpp.)
#include "actors/supervisor_actor.hpp"

#include <gtest/gtest.h>

#include <caf/scheduler/test_coordinator.hpp>

#include <optional>
#include <vector>

#include "actors/messages.hpp"

namespace tether {
namespace {

using namespace std::chrono_literals;
using stop_atom = caf::atom_constant<caf::atom("stop_now")>;

// What a stand-in request actor saw: the reason of the exit that reached it, if any.
struct seen {
  std::optional<caf::error> exit_reason;
};

// A request actor's stand-in: it traps exits as the real one does and, told so, stays alive
// after a drain's exit (its sockets still closing) until stop_atom.
caf::behavior fake_request(caf::event_based_actor* self, std::shared_ptr<seen> log,
                           bool linger_after_exit) {
  self->set_exit_handler([self, log, linger_after_exit](caf::exit_msg& msg) {
    log->exit_reason = msg.reason;
    if (!linger_after_exit) self->quit();
  });
  return {[self](stop_atom) { self->quit(); }};
}

class SupervisorActorTest : public ::testing::Test {
 protected:
  SupervisorActorTest()
      : system_(cfg_.set("scheduler.policy", caf::atom("testing"))),
        sched_(dynamic_cast<caf::scheduler::test_coordinator&>(system_.scheduler())) {
    supervisor_ = system_.spawn<supervisor_actor>();
    sched_.run();
  }
  // The actor system waits for every actor at its end: the stand-ins and the supervisor go first.
  ~SupervisorActorTest() override {
    for (auto& r : requests_) caf::anon_send(r, stop_atom::value);
    caf::anon_send_exit(supervisor_, caf::exit_reason::user_shutdown);
    sched_.run();
  }

  caf::actor adopt(std::shared_ptr<seen> log, bool linger = false) {
    auto req = system_.spawn(fake_request, std::move(log), linger);
    requests_.push_back(req);
    caf::anon_send(supervisor_, adopt_atom::value, req);
    sched_.run();
    return req;
  }

  // Asks for the drain from a probe actor, which keeps the answer when it comes.
  void ask_drain() {
    // Its state comes as arguments, not captures: CAF 0.17 dereferences a null pointer to the
    // empty argument tuple of a spawn without arguments, which UBSan reports.
    system_.spawn(
        [](caf::event_based_actor* self, std::shared_ptr<std::optional<std::uint64_t>> answer,
           caf::actor sup) {
          self->request(sup, caf::infinite, drain_atom::value)
              .then([answer](drained_atom, std::uint64_t cancelled) { *answer = cancelled; },
                    [](caf::error&) {});
        },
        answer_, supervisor_);
    sched_.run();
  }
  std::optional<std::uint64_t> drained() const { return *answer_; }

  caf::actor_system_config cfg_;
  caf::actor_system system_;
  caf::scheduler::test_coordinator& sched_;
  caf::actor supervisor_;
  std::vector<caf::actor> requests_;
  std::shared_ptr<std::optional<std::uint64_t>> answer_ =
      std::make_shared<std::optional<std::uint64_t>>();
};

TEST_F(SupervisorActorTest, DrainWithNoRequestsAnswersAtOnce) {
  ask_drain();
  EXPECT_EQ(drained(), std::optional<std::uint64_t>{0});
}

TEST_F(SupervisorActorTest, RequestsEndingOnTheirOwnBeforeTheTimeoutAreDrainedUncancelled) {
  auto log = std::make_shared<seen>();
  auto req = adopt(log, true);
  ask_drain();
  EXPECT_FALSE(drained()) << "answered while a request is still alive";
  caf::anon_send(req, stop_atom::value);
  sched_.run();
  EXPECT_EQ(drained(), std::optional<std::uint64_t>{0});
  EXPECT_FALSE(log->exit_reason) << "a request that ended in time was stopped";
}

TEST_F(SupervisorActorTest, TheDrainsEndStopsEachTreeWithTheDrainReasonAndAwaitsIt) {
  auto a = std::make_shared<seen>();
  auto b = std::make_shared<seen>();
  auto lingering = adopt(a, true);  // its sockets take a while to close
  adopt(b, false);
  ask_drain();
  EXPECT_FALSE(drained());
  EXPECT_FALSE(a->exit_reason) << "a tree was stopped before the drain's end";
  caf::anon_send(supervisor_, drain_now_atom::value);
  sched_.run();
  ASSERT_TRUE(a->exit_reason);
  ASSERT_TRUE(b->exit_reason);
  EXPECT_EQ(stop_reason_of(*a->exit_reason), stop_reason::drain);
  EXPECT_EQ(stop_reason_of(*b->exit_reason), stop_reason::drain);
  // The drain waits for the tree's end, not for the stop to be sent.
  EXPECT_FALSE(drained()) << "answered before the lingering request ended";
  caf::anon_send(lingering, stop_atom::value);
  sched_.run();
  EXPECT_EQ(drained(), std::optional<std::uint64_t>{2});
}

// A second signal may come before the drain is asked for: the trees stop all the same, and the
// drain asked afterwards counts them.
TEST_F(SupervisorActorTest, TheDrainsEndBeforeTheDrainIsAskedStopsTheTreesAndIsCounted) {
  auto log = std::make_shared<seen>();
  adopt(log);
  caf::anon_send(supervisor_, drain_now_atom::value);
  sched_.run();
  ASSERT_TRUE(log->exit_reason);
  EXPECT_EQ(stop_reason_of(*log->exit_reason), stop_reason::drain);
  ask_drain();
  EXPECT_EQ(drained(), std::optional<std::uint64_t>{1});
}

TEST_F(SupervisorActorTest, ARequestThatEndedBeforeItWasAdoptedIsNotWaitedFor) {
  auto log = std::make_shared<seen>();
  auto req = system_.spawn(fake_request, log, true);
  caf::anon_send(req, stop_atom::value);
  sched_.run();  // it has ended
  caf::anon_send(supervisor_, adopt_atom::value, req);
  sched_.run();
  ask_drain();
  EXPECT_EQ(drained(), std::optional<std::uint64_t>{0});
}

TEST_F(SupervisorActorTest, TheShutdownsExitEndsTheSupervisorAndReachesItsRequests) {
  auto log = std::make_shared<seen>();
  adopt(log);
  auto down = std::make_shared<bool>(false);
  auto probe = system_.spawn(
      [](caf::event_based_actor* self, std::shared_ptr<bool> down, caf::actor sup) {
        self->monitor(sup);
        self->set_down_handler([down](caf::down_msg&) { *down = true; });
        return caf::behavior{[self](stop_atom) { self->quit(); }};
      },
      down, supervisor_);
  requests_.push_back(probe);
  sched_.run();
  caf::anon_send_exit(supervisor_, caf::exit_reason::user_shutdown);
  sched_.run();
  EXPECT_TRUE(*down) << "the supervisor trapped the shutdown's exit";
  ASSERT_TRUE(log->exit_reason) << "the link did not carry the supervisor's end";
  EXPECT_EQ(*log->exit_reason, caf::make_error(caf::exit_reason::user_shutdown));
}

}  // namespace
}  // namespace tether
