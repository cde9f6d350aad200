// The drain's one clock under CAF's test coordinator, in front of two real io-thread supervisors:
// the timeout fires when the test advances its clock (manual_timers), and every message is
// delivered when the test says.
#include "actors/drain_actor.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "actors/supervisor_actor.hpp"
#include "tests/actors/coordinator_fixture.hpp"
#include "tests/actors/drain_probe.hpp"
#include "tests/actors/manual_timers.hpp"

namespace tether {
namespace {

using namespace std::chrono_literals;
using stop_atom = caf::atom_constant<caf::atom("stop_now")>;
using event_log = std::shared_ptr<std::vector<std::string>>;

using queued_list = std::shared_ptr<std::vector<caf::actor>>;

// A budget's (or a shard's) stand-in: it notes when it is told to refuse this node's work, and
// ends the requests queued for its slots as a refusal does.
caf::behavior fake_budget(caf::event_based_actor* self, event_log log, std::string name,
                          queued_list queued) {
  return {[self, log, name, queued](drain_now_atom) {
            log->push_back(name + " refuses");
            for (const auto& q : *queued) self->send(q, stop_atom::value);
          },
          [self](stop_atom) { self->quit(); }};
}

// A request actor's stand-in: it traps exits as the real one does, notes the drain's exit in the
// same log as the budgets, and (`linger`) stays alive after it until stop_atom, its sockets still
// closing.
caf::behavior fake_request(caf::event_based_actor* self, event_log log, std::string name,
                           bool linger) {
  self->set_exit_handler([self, log, name, linger](caf::exit_msg& msg) {
    log->push_back(name + (stop_reason_of(msg.reason) == stop_reason::drain ? " stopped (drain)"
                                                                            : " stopped"));
    if (!linger) self->quit();
  });
  return {[self](stop_atom) { self->quit(); }};
}

// The drain's clock: it outlives the actors, which cancel their timers as they end.
struct drain_clock {
  manual_timers timers_;
};

class DrainActorTest : protected drain_clock, public coordinator_fixture {
 protected:
  DrainActorTest() {
    budgets_ = {system_.spawn(fake_budget, log_, "budget", queued_),
                system_.spawn(fake_budget, log_, "shard 0", queued_),
                system_.spawn(fake_budget, log_, "shard 1", queued_)};
    supervisors_ = {system_.spawn<supervisor_actor>(), system_.spawn<supervisor_actor>()};
    drain_ = system_.spawn(drain_actor, drain_timeout, budgets_, supervisors_, &timers_);
    run();
  }
  ~DrainActorTest() override {
    for (auto& r : requests_) caf::anon_send(r, stop_atom::value);
    for (auto& s : supervisors_) caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(drain_, caf::exit_reason::user_shutdown);
    for (auto& b : budgets_) caf::anon_send(b, stop_atom::value);
    run();
  }

  // A request started on io thread `thread`, adopted by that thread's supervisor.
  caf::actor start(std::size_t thread, const std::string& name, bool linger = false) {
    auto req = system_.spawn(fake_request, log_, name, linger);
    requests_.push_back(req);
    adopt_request(supervisors_.at(thread), req);
    run();
    return req;
  }

  void ask_drain() {
    ask_drain_from_probe(system_, drain_, answer_);
    run();
  }
  std::optional<std::uint64_t> drained() const { return *answer_; }

  void advance(std::chrono::milliseconds by) {
    timers_.advance(by);
    run();
  }

  static constexpr auto drain_timeout = 30s;
  event_log log_ = std::make_shared<std::vector<std::string>>();
  queued_list queued_ = std::make_shared<std::vector<caf::actor>>();
  std::vector<caf::actor> budgets_;
  std::vector<caf::actor> supervisors_;
  caf::actor drain_;
  std::vector<caf::actor> requests_;
  drain_answer answer_ = std::make_shared<std::optional<std::uint64_t>>();
};

TEST_F(DrainActorTest, ADrainWithNoRequestsAnswersAtOnceAndTellsNoBudget) {
  ask_drain();
  EXPECT_EQ(drained(), std::optional<std::uint64_t>{0});
  advance(drain_timeout);  // the timer's message, if it comes, finds nothing to end
  EXPECT_TRUE(log_->empty());
}

TEST_F(DrainActorTest, RequestsOnEveryThreadThatEndInTimeAreDrainedUncancelled) {
  auto a = start(0, "a", true);
  auto b = start(1, "b", true);
  ask_drain();
  advance(drain_timeout - 1ms);
  caf::anon_send(a, stop_atom::value);
  run();
  EXPECT_FALSE(drained()) << "answered while thread 1's request is alive";
  caf::anon_send(b, stop_atom::value);
  run();
  EXPECT_EQ(drained(), std::optional<std::uint64_t>{0});
  advance(1ms);
  EXPECT_TRUE(log_->empty()) << "something was stopped or told after the drain had ended";
}

// One clock for every thread: at the timeout every budget and every thread's shard is told, and
// the trees of both threads are stopped; the answer waits for the last tree to end. (That the
// budgets are sent theirs first, in the same handler, is not visible here: this scheduler runs
// no actor before a handler has sent everything.)
TEST_F(DrainActorTest, AtTheTimeoutEveryBudgetIsToldAndEveryThreadsTreesAreStopped) {
  auto lingering = start(0, "a", true);
  start(1, "b");
  ask_drain();
  advance(drain_timeout - 1ms);
  EXPECT_TRUE(log_->empty()) << "stopped before the timeout";
  advance(1ms);
  std::vector<std::string> heard(*log_);
  std::sort(heard.begin(), heard.end());
  EXPECT_EQ(heard,
            (std::vector<std::string>{"a stopped (drain)", "b stopped (drain)", "budget refuses",
                                      "shard 0 refuses", "shard 1 refuses"}));
  EXPECT_FALSE(drained()) << "answered before the lingering request ended";
  caf::anon_send(lingering, stop_atom::value);
  run();
  EXPECT_EQ(drained(), std::optional<std::uint64_t>{2});
}

// A request still queued for a slot when the timeout fires is ended by the budgets' refusal,
// which they are sent first; it may be gone before its supervisor is told. It was cut short all
// the same, and the answer counts it.
TEST_F(DrainActorTest, ARequestTheBudgetsRefusalEndsBeforeItsSupervisorIsToldIsCountedCutShort) {
  auto lingering = start(0, "streaming", true);
  queued_->push_back(start(1, "queued", true));
  ask_drain();
  timers_.advance(drain_timeout);
  // Every actor but the supervisors runs first: the refusal ends the queued request, and its cell
  // takes it out, before either supervisor hears of the drain's end.
  auto held_back = [this](caf::resumable* job) {
    for (const auto& s : supervisors_)
      if (job == dynamic_cast<caf::resumable*>(caf::actor_cast<caf::abstract_actor*>(s)))
        return false;
    return true;
  };
  sched_.run_jobs_filtered(held_back);
  run();
  std::vector<std::string> heard(*log_);
  std::sort(heard.begin(), heard.end());
  EXPECT_EQ(heard, (std::vector<std::string>{"budget refuses", "shard 0 refuses", "shard 1 refuses",
                                             "streaming stopped (drain)"}))
      << "the queued request was still there when its supervisor was told";
  caf::anon_send(lingering, stop_atom::value);
  run();
  EXPECT_EQ(drained(), std::optional<std::uint64_t>{2});
}

// The drain's end now (a second signal): the same order, before the timeout; said twice, once.
TEST_F(DrainActorTest, TheDrainsEndNowStopsEveryThreadAtOnceAndOnlyOnce) {
  start(0, "a");
  start(1, "b");
  ask_drain();
  caf::anon_send(drain_, drain_now_atom::value);
  caf::anon_send(drain_, drain_now_atom::value);
  run();
  EXPECT_EQ(log_->size(), 5u);  // three budgets told, two trees stopped
  EXPECT_EQ(drained(), std::optional<std::uint64_t>{2});
  advance(drain_timeout);
  EXPECT_EQ(log_->size(), 5u);
}

}  // namespace
}  // namespace tether
