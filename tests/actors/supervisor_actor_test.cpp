// An io thread's supervisor under CAF's test coordinator: every message is delivered when the
// test says, so the drain's races are tested without wall-clock slack. (The drain's clock and the
// budgets' order are the drain actor's: drain_actor_test.cpp.)
#include "actors/supervisor_actor.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <thread>
#include <vector>

#include "actors/messages.hpp"
#include "tests/actors/coordinator_fixture.hpp"
#include "tests/actors/drain_probe.hpp"

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

class SupervisorActorTest : public coordinator_fixture {
 protected:
  SupervisorActorTest() {
    supervisor_ = system_.spawn<supervisor_actor>();
    run();
  }
  // The actor system waits for every actor at its end: the stand-ins and the supervisor go first.
  ~SupervisorActorTest() override {
    for (auto& r : requests_) caf::anon_send(r, stop_atom::value);
    caf::anon_send_exit(supervisor_, caf::exit_reason::user_shutdown);
    run();
  }

  caf::actor adopt(std::shared_ptr<seen> log, bool linger = false) {
    auto req = system_.spawn(fake_request, std::move(log), linger);
    requests_.push_back(req);
    adopt_request(supervisor_, req);
    run();
    return req;
  }

  void ask_drain() {
    ask_drain_from_probe(system_, supervisor_, answer_);
    run();
  }
  std::optional<std::uint64_t> drained() const { return *answer_; }

  caf::actor supervisor_;
  std::vector<caf::actor> requests_;
  drain_answer answer_ = std::make_shared<std::optional<std::uint64_t>>();
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
  run();
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
  run();
  ASSERT_TRUE(a->exit_reason);
  ASSERT_TRUE(b->exit_reason);
  EXPECT_EQ(stop_reason_of(*a->exit_reason), stop_reason::drain);
  EXPECT_EQ(stop_reason_of(*b->exit_reason), stop_reason::drain);
  // The drain waits for the tree's end, not for the stop to be sent.
  EXPECT_FALSE(drained()) << "answered before the lingering request ended";
  caf::anon_send(lingering, stop_atom::value);
  run();
  EXPECT_EQ(drained(), std::optional<std::uint64_t>{2});
}

// A second signal may come before the drain is asked for: the trees stop all the same, and the
// drain asked afterwards counts them.
TEST_F(SupervisorActorTest, TheDrainsEndBeforeTheDrainIsAskedStopsTheTreesAndIsCounted) {
  auto log = std::make_shared<seen>();
  adopt(log);
  caf::anon_send(supervisor_, drain_now_atom::value);
  run();
  ASSERT_TRUE(log->exit_reason);
  EXPECT_EQ(stop_reason_of(*log->exit_reason), stop_reason::drain);
  ask_drain();
  EXPECT_EQ(drained(), std::optional<std::uint64_t>{1});
}

// The supervisor links its requests through cells of a bounded size (a request's end scans its
// cell's links): the drain reaches every cell, and counts each request once.
TEST_F(SupervisorActorTest, RequestsInManyCellsAreAllStoppedAtTheDrainsEndAndCountedOnce) {
  std::vector<std::pair<caf::actor, std::shared_ptr<seen>>> started;
  for (int i = 0; i < 150; ++i) {
    auto log = std::make_shared<seen>();
    started.emplace_back(adopt(log, true), log);
  }
  for (std::size_t i = 0; i < started.size(); i += 3)
    caf::anon_send(started[i].first, stop_atom::value);  // a third end on their own
  run();
  ask_drain();
  EXPECT_FALSE(drained());
  caf::anon_send(supervisor_, drain_now_atom::value);
  run();
  std::size_t stopped = 0;
  for (std::size_t i = 0; i < started.size(); ++i) {
    const auto& log = started[i].second;
    if (i % 3 == 0) {
      EXPECT_FALSE(log->exit_reason) << "request " << i << " had ended before the drain's end";
    } else if (log->exit_reason && stop_reason_of(*log->exit_reason) == stop_reason::drain) {
      ++stopped;
    }
  }
  EXPECT_EQ(stopped, 100U);
  EXPECT_FALSE(drained()) << "answered while the stopped requests linger";
  for (std::size_t i = 0; i < started.size(); ++i)
    if (i % 3 != 0) caf::anon_send(started[i].first, stop_atom::value);
  run();
  EXPECT_EQ(drained(), std::optional<std::uint64_t>{100});
}

// A cell that has adopted its share ends with its last request: at thousands of requests a
// second, a cell left behind would be a leak.
TEST_F(SupervisorActorTest, ACellEndsOnceItIsFullAndItsLastRequestHasEnded) {
  const auto before = system_.registry().running();
  for (int i = 0; i < 300; ++i) {
    auto req = adopt(std::make_shared<seen>(), true);
    caf::anon_send(req, stop_atom::value);
    run();
  }
  // Only the cell that adopts now is left (and each request's stand-in has ended).
  EXPECT_EQ(system_.registry().running(), before + 1);
}

TEST_F(SupervisorActorTest, TheShutdownReachesTheRequestsOfEveryCell) {
  std::vector<std::shared_ptr<seen>> logs;
  for (int i = 0; i < 100; ++i) {
    logs.push_back(std::make_shared<seen>());
    adopt(logs.back());
  }
  caf::anon_send_exit(supervisor_, caf::exit_reason::user_shutdown);
  run();
  std::size_t reached = 0;
  for (const auto& log : logs)
    if (log->exit_reason && *log->exit_reason == caf::make_error(caf::exit_reason::user_shutdown))
      ++reached;
  EXPECT_EQ(reached, logs.size());
}

TEST_F(SupervisorActorTest, ARequestThatEndedBeforeItWasAdoptedIsNotWaitedFor) {
  auto log = std::make_shared<seen>();
  auto req = system_.spawn(fake_request, log, true);
  caf::anon_send(req, stop_atom::value);
  run();  // it has ended
  adopt_request(supervisor_, req);
  run();
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
  run();
  caf::anon_send_exit(supervisor_, caf::exit_reason::user_shutdown);
  run();
  EXPECT_TRUE(*down) << "the supervisor trapped the shutdown's exit";
  ASSERT_TRUE(log->exit_reason) << "the link did not carry the supervisor's end";
  EXPECT_EQ(*log->exit_reason, caf::make_error(caf::exit_reason::user_shutdown));
}

// Outside the test coordinator: io threads adopt their requests with no message, while the
// supervisor, on a worker of its own, takes out the ones that end. Every request still alive at
// the drain's end must be held (and stopped), and every one that ended must have been let go, or
// the drain would never answer.
TEST(SupervisorAdoptionAcrossThreadsTest, EveryRequestAdoptedFromAnyThreadIsHeldUntilItsEnd) {
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system system{cfg};
  auto supervisor = system.spawn<supervisor_actor>();
  constexpr int threads = 4;
  constexpr int per_thread = 400;
  std::vector<std::vector<std::shared_ptr<seen>>> kept(threads);
  {
    std::vector<std::thread> io;
    for (int t = 0; t < threads; ++t)
      io.emplace_back([&, t] {
        for (int i = 0; i < per_thread; ++i) {
          auto log = std::make_shared<seen>();
          auto req = system.spawn(fake_request, log, false);
          adopt_request(supervisor, req);
          if (i % 2 == 0)
            caf::anon_send(req, stop_atom::value);  // ends while others are being adopted
          else
            kept[static_cast<std::size_t>(t)].push_back(log);
        }
      });
    for (auto& t : io) t.join();
  }
  std::optional<std::uint64_t> cancelled;
  {
    caf::scoped_actor self{system};
    auto answer = self->request(supervisor, std::chrono::seconds(30), drain_atom::value);
    caf::anon_send(supervisor, drain_now_atom::value);
    answer.receive([&](drained_atom, std::uint64_t n) { cancelled = n; },
                   [&](caf::error& e) { ADD_FAILURE() << "no drain answer: " << to_string(e); });
  }
  caf::anon_send_exit(supervisor, caf::exit_reason::user_shutdown);
  ASSERT_TRUE(cancelled);
  constexpr std::uint64_t alive = threads * per_thread / 2;
  EXPECT_GE(*cancelled, alive);  // plus any that were ending as the drain began
  EXPECT_LE(*cancelled, 2 * alive);
  std::size_t stopped = 0;
  for (const auto& logs : kept)
    for (const auto& log : logs)
      if (log->exit_reason && stop_reason_of(*log->exit_reason) == stop_reason::drain) ++stopped;
  EXPECT_EQ(stopped, alive) << "a request adopted on one thread was not held";
}

}  // namespace
}  // namespace tether
