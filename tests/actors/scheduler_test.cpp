// tether's scheduler with an io_runtime lent to it: the first worker runs the io context, its
// jobs run in that context's handlers, and neither side can starve or strand the other.
#include "actors/scheduler.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>

#include "net/io_runtime.hpp"

namespace tether {
namespace {

using namespace std::chrono_literals;

// An actor system whose first worker runs `io`; the io stops before the system goes, as in
// main.cpp.
class LentSchedulerTest : public ::testing::Test {
 protected:
  void start(std::size_t workers) {
    use_tether_scheduler(cfg_, &io_);
    cfg_.set("scheduler.max-threads", workers);
    cfg_.set("logger.verbosity", caf::atom("quiet"));
    system_ = std::make_unique<caf::actor_system>(cfg_);
  }

  void TearDown() override {
    io_.join();
    system_.reset();
  }

  // Runs `fn` in a handler of the io context.
  void post_io(std::function<void()> fn) {
    auto* heap = new std::function<void()>(std::move(fn));
    io_.post(
        [](void* arg) {
          std::unique_ptr<std::function<void()>> f{static_cast<std::function<void()>*>(arg)};
          (*f)();
        },
        heap);
  }

  // An actor that answers every int with the same int. (Every actor here is spawned with an
  // argument: CAF 0.17 spawns an argument-less function through a null tuple, which UBSan
  // reports; tether's actors all take arguments.)
  caf::actor spawn_echo() {
    return system_->spawn([](int) -> caf::behavior { return {[](int n) { return n; }}; }, 0);
  }

  // Asks `echo` for n; true if the answer came within the bound.
  bool round_trip(const caf::actor& echo, int n) {
    caf::scoped_actor self{*system_};
    bool ok = false;
    self->request(echo, 5s, n).receive([&](int m) { ok = m == n; }, [](caf::error&) {});
    return ok;
  }

  net::io_runtime io_{net::io_runtime::lent_thread};
  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> system_;
};

TEST_F(LentSchedulerTest, AnIoHandlerAndTheActorItMessagesRunOnTheSameThread) {
  start(1);
  std::promise<std::thread::id> in_actor;
  auto actor = system_->spawn(
      [&in_actor](int) -> caf::behavior {
        return {[&in_actor](int) { in_actor.set_value(std::this_thread::get_id()); }};
      },
      0);
  std::promise<std::thread::id> in_handler;
  post_io([&] {
    in_handler.set_value(std::this_thread::get_id());
    caf::anon_send(actor, 1);
  });
  auto handler_thread = in_handler.get_future();
  auto actor_thread = in_actor.get_future();
  ASSERT_EQ(handler_thread.wait_for(5s), std::future_status::ready);
  ASSERT_EQ(actor_thread.wait_for(5s), std::future_status::ready);
  const auto io_id = handler_thread.get();
  EXPECT_EQ(actor_thread.get(), io_id);
  EXPECT_NE(io_id, std::this_thread::get_id());
}

// The lent thread sleeps in the io context's poll when it has nothing to do: a message from a
// thread of its own (here the test's) must wake it, every time.
TEST_F(LentSchedulerTest, AMessageFromAnotherThreadWakesTheIdleIoThreadEveryTime) {
  start(1);
  auto echo = spawn_echo();
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(round_trip(echo, i)) << "round trip " << i;
}

// Actors that keep sending themselves messages must not keep the io handlers from running: the
// io shares their thread.
TEST_F(LentSchedulerTest, IoHandlersRunWhileActorsKeepTheThreadBusy) {
  start(1);
  // Shared with the actors, which may outlive this body until the system shuts down.
  struct shared {
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> spins{0};
  };
  auto state = std::make_shared<shared>();
  auto spinner = [state](caf::event_based_actor* self, int) -> caf::behavior {
    return {[self, state](caf::atom_constant<caf::atom("spin")>) {
      state->spins.fetch_add(1, std::memory_order_relaxed);
      if (!state->stop.load()) self->send(self, caf::atom_constant<caf::atom("spin")>::value);
    }};
  };
  auto a = system_->spawn(spinner, 0);
  auto b = system_->spawn(spinner, 1);
  caf::anon_send(a, caf::atom_constant<caf::atom("spin")>::value);
  caf::anon_send(b, caf::atom_constant<caf::atom("spin")>::value);
  // Handlers posted from the test thread while the spinners run, each awaited.
  for (int i = 0; i < 20; ++i) {
    std::promise<void> ran;
    post_io([&ran] { ran.set_value(); });
    ASSERT_EQ(ran.get_future().wait_for(5s), std::future_status::ready) << "handler " << i;
  }
  const auto seen = state->spins.load();
  state->stop = true;
  // The spinners were running all along (not finished before the handlers were posted).
  EXPECT_GT(seen, 1000u);
}

// A timer's news (sent under urgent_delivery, as actor_timers sends it) runs before the jobs that
// were already queued on the io thread, in the order it was sent; the others keep theirs.
TEST_F(LentSchedulerTest, AnUrgentDeliveryRunsAheadOfTheJobsAlreadyQueuedInItsOwnOrder) {
  start(1);
  // Written on the io thread only; read once the last actor has told the test.
  struct shared {
    std::vector<std::string> order;
    std::promise<void> all_ran;
  };
  auto state = std::make_shared<shared>();
  constexpr std::size_t actors = 5;
  auto recorder = [state](caf::event_based_actor*, std::string name) -> caf::behavior {
    return {[state, name](int n) {
      if (n == 0) return n;  // the test's round trip, before the run
      state->order.push_back(name);
      if (state->order.size() == actors) state->all_ran.set_value();
      return n;
    }};
  };
  auto a = system_->spawn(recorder, std::string{"a"});
  auto b = system_->spawn(recorder, std::string{"b"});
  auto c = system_->spawn(recorder, std::string{"c"});
  auto u1 = system_->spawn(recorder, std::string{"urgent 1"});
  auto u2 = system_->spawn(recorder, std::string{"urgent 2"});
  for (const auto& x : {a, b, c, u1, u2}) ASSERT_TRUE(round_trip(x, 0));  // all idle now
  post_io([&] {
    caf::anon_send(a, 1);
    caf::anon_send(b, 1);
    {
      const urgent_delivery first;
      caf::anon_send(u1, 1);
      caf::anon_send(u2, 1);
    }
    caf::anon_send(c, 1);
  });
  ASSERT_EQ(state->all_ran.get_future().wait_for(5s), std::future_status::ready);
  EXPECT_EQ(state->order, (std::vector<std::string>{"urgent 1", "urgent 2", "a", "b", "c"}));
}

TEST_F(LentSchedulerTest, ActorsKeepRunningAfterTheIoStops) {
  start(1);
  auto echo = spawn_echo();
  ASSERT_TRUE(round_trip(echo, 1));
  io_.join();
  ASSERT_TRUE(io_.stopped());
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(round_trip(echo, i)) << "round trip " << i;
}

// With a second worker, jobs go to both (round robin): the one that sleeps on its condition
// variable and the one in the io context.
TEST_F(LentSchedulerTest, WithTwoWorkersEveryActorAnswers) {
  start(2);
  std::vector<caf::actor> echoes;
  for (int i = 0; i < 200; ++i) echoes.push_back(spawn_echo());
  caf::scoped_actor self{*system_};
  for (int i = 0; i < 200; ++i) self->send(echoes[static_cast<std::size_t>(i)], i);
  int answers = 0;
  long sum = 0;
  for (int i = 0; i < 200; ++i) {
    self->receive(
        [&](int n) {
          ++answers;
          sum += n;
        },
        caf::after(5s) >> [] {});
  }
  EXPECT_EQ(answers, 200);
  EXPECT_EQ(sum, 199L * 200 / 2);
  std::promise<void> ran;
  post_io([&ran] { ran.set_value(); });
  EXPECT_EQ(ran.get_future().wait_for(5s), std::future_status::ready);
}

// Two io runtimes, one lent to each worker (as main.cpp does with server.threads = 2).
class EveryIoSchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    use_tether_scheduler(cfg_, std::vector<net::io_runtime*>{&io_[0], &io_[1]});
    cfg_.set("scheduler.max-threads", std::size_t{2});
    cfg_.set("logger.verbosity", caf::atom("quiet"));
    system_ = std::make_unique<caf::actor_system>(cfg_);
  }

  void TearDown() override {
    for (auto& io : io_) io.join();
    system_.reset();
  }

  // Runs `fn` in a handler of io `i` and waits for it.
  void on_io(std::size_t i, std::function<void()> fn) {
    struct job {
      std::function<void()> fn;
      std::promise<void> done;
    };
    auto* j = new job{std::move(fn), {}};
    auto done = j->done.get_future();
    io_[i].post(
        [](void* arg) {
          std::unique_ptr<job> owned{static_cast<job*>(arg)};
          owned->fn();
          owned->done.set_value();
        },
        j);
    ASSERT_EQ(done.wait_for(5s), std::future_status::ready);
  }

  std::thread::id thread_of_io(std::size_t i) {
    std::thread::id id;
    on_io(i, [&id] { id = std::this_thread::get_id(); });
    return id;
  }

  net::io_runtime io_[2] = {net::io_runtime{net::io_runtime::lent_thread},
                            net::io_runtime{net::io_runtime::lent_thread}};
  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> system_;
};

// An actor that reports, for every message, the thread it ran on.
caf::behavior thread_reporter(caf::event_based_actor*,
                              std::shared_ptr<std::promise<std::thread::id>>* next) {
  return {[next](int) { (*next)->set_value(std::this_thread::get_id()); }};
}

// Each io context runs on a thread of its own, and an actor spawned by one io thread's handler
// runs there. Then, messaged from the other io thread, it still runs at home: a request's actors
// stay with the thread that serves its caller, whichever thread sends them a message (a timer,
// an upstream's bytes, the budget's grant). Without the home rule, the sender's thread took it.
TEST_F(EveryIoSchedulerTest, AnActorRunsOnTheIoThreadThatSpawnedItWhoeverMessagesIt) {
  const auto first = thread_of_io(0);
  const auto second = thread_of_io(1);
  ASSERT_NE(first, second);
  for (int round = 0; round < 50; ++round) {
    const std::size_t home = static_cast<std::size_t>(round % 2);
    const auto home_thread = home == 0 ? first : second;
    auto next = std::make_shared<std::promise<std::thread::id>>();
    caf::actor actor;
    on_io(home, [&] {
      actor = system_->spawn(thread_reporter, &next);
      caf::anon_send(actor, 0);
    });
    auto ran = next->get_future();
    ASSERT_EQ(ran.wait_for(5s), std::future_status::ready);
    ASSERT_EQ(ran.get(), home_thread) << "round " << round;
    for (int i = 1; i <= 3; ++i) {
      // The actor's job has ended once a handler queued behind it runs: the message below finds
      // it idle and must wake it at home.
      on_io(home, [] {});
      next = std::make_shared<std::promise<std::thread::id>>();
      auto later = next->get_future();
      on_io(1 - home, [&] { caf::anon_send(actor, i); });
      ASSERT_EQ(later.wait_for(5s), std::future_status::ready);
      EXPECT_EQ(later.get(), home_thread) << "round " << round << ", message " << i;
    }
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  }
}

// An actor made to roam (the budget, the supervisor) runs on the thread that wakes it: asked from
// either io thread, it answers there, with no hop to a home and back.
TEST_F(EveryIoSchedulerTest, ARoamingActorRunsOnTheIoThreadThatWakesIt) {
  const std::thread::id threads[] = {thread_of_io(0), thread_of_io(1)};
  auto next = std::make_shared<std::promise<std::thread::id>>();
  caf::actor actor;
  on_io(0, [&] { actor = system_->spawn(thread_reporter, &next); });
  ASSERT_TRUE(roam(*system_, actor));
  for (int i = 0; i < 20; ++i) {
    const std::size_t from = static_cast<std::size_t>(i % 2);
    next = std::make_shared<std::promise<std::thread::id>>();
    auto ran = next->get_future();
    on_io(from, [&] { caf::anon_send(actor, i); });
    ASSERT_EQ(ran.wait_for(5s), std::future_status::ready);
    EXPECT_EQ(ran.get(), threads[from]) << "message " << i;
    // The actor's job has ended once a handler queued behind it runs: the next message finds it
    // idle, not still running here.
    on_io(from, [] {});
  }
  caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace tether
