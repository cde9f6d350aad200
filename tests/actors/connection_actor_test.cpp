// The connection actor alone between stand-ins for its attempt and request, with the real budget,
// under CAF's test coordinator: it asks for a slot before it opens anything, closes the socket
// when its attempt's tree goes down, and exits — freeing the slot and reporting the work's end —
// only once net/ says the socket closed.
#include "actors/connection_actor.hpp"

#include "tests/actors/tree_kit.hpp"

namespace tether {
namespace {

using namespace std::chrono_literals;
using tree_kit::tree_test;
using stop_atom = caf::atom_constant<caf::atom("stop_now")>;

// What the stand-ins heard, in order.
struct heard {
  std::vector<std::string> attempt;
  struct work_end {
    bool held_slot = false;
    std::uint32_t attempt_index = 0;
  };
  std::vector<work_end> request;
  std::vector<caf::actor> connections;  // as spawned, by the stand-ins
};

// The attempt's stand-in: it spawns its connection linked, as the real one does, notes what
// net/ and the connection tell it, and goes down when told, with the reason given.
caf::behavior fake_attempt(caf::event_based_actor* self, std::shared_ptr<heard> log, runtime_ptr rt,
                           caf::actor request, connection_spec spec) {
  log->connections.push_back(
      spawn_connection(self, std::move(rt), std::move(request), std::move(spec)));
  return {
      [log](up_fail_atom, std::int32_t kind, const std::string&) {
        log->attempt.push_back("fail " + std::to_string(kind));
      },
      [log](granted_atom) { log->attempt.emplace_back("granted"); },
      [log](up_whole_atom, int status, const net::header_list&, const std::string&) {
        log->attempt.push_back("whole " + std::to_string(status));
      },
      [self](stop_atom, caf::error& reason) { self->quit(std::move(reason)); },
  };
}

caf::behavior fake_request(caf::event_based_actor*, std::shared_ptr<heard> log) {
  return {
      [log](work_ended_atom, std::uint64_t, std::uint32_t index, std::int64_t, bool held_slot,
            std::int64_t) {
        log->request.push_back({held_slot, index});
      },
      [](stop_atom) {},
  };
}

class ConnectionActorTest : public tree_test {
 protected:
  explicit ConnectionActorTest(config::gateway_config cfg = tree_kit::two_upstreams(1))
      : tree_test(std::move(cfg)) {}
  // The stand-ins go first; their connections then close with the base's exchanges.
  ~ConnectionActorTest() override {
    for (auto& a : held_) caf::anon_send_exit(a, caf::exit_reason::kill);
    caf::anon_send_exit(request_, caf::exit_reason::kill);
    run();
  }

  // A connection for upstream "a" under a fresh attempt stand-in; returns the attempt.
  caf::actor connect(std::uint32_t index = 0) {
    connection_spec spec;
    spec.upstream = 0;
    spec.attempt_index = index;
    spec.tell_grant = true;
    spec.request.target = "/v1/chat/completions";
    spec.request.body = "{}";
    auto attempt = system_.spawn(fake_attempt, log_, rt_, request_, std::move(spec));
    held_.push_back(attempt);
    run();
    return attempt;
  }

  void stop(const caf::actor& attempt, stop_reason why) {
    caf::anon_send(attempt, stop_atom::value, stop_error(why));
    run();
  }

  std::shared_ptr<heard> log_ = std::make_shared<heard>();
  caf::actor request_ = system_.spawn(fake_request, log_);
  std::vector<caf::actor> held_;
};

TEST_F(ConnectionActorTest, ItAsksForASlotBeforeItOpensAnything) {
  connect(0);
  ASSERT_EQ(upstream(0).exchanges.size(), 1u);
  EXPECT_EQ(log_->attempt, std::vector<std::string>{"granted"});
  EXPECT_EQ(slots_held(), 1u);
  // The cap is one: the next connection waits in the budget's queue and opens nothing.
  connect(1);
  EXPECT_EQ(upstream(0).exchanges.size(), 1u);
  EXPECT_EQ(slots_held(), 1u);
}

TEST_F(ConnectionActorTest, TheTreesExitClosesTheSocketAndTheSlotReturnsOnlyAtTheClose) {
  auto attempt = connect(0);
  auto& ex = upstream(0).exchanges.at(0);
  stop(attempt, stop_reason::deadline);
  EXPECT_TRUE(ex.ex->cancelled) << "the connection did not close its socket";
  EXPECT_TRUE(log_->request.empty()) << "the work was reported ended before the socket closed";
  EXPECT_EQ(slots_held(), 1u);
  ex.close();
  run();
  ASSERT_EQ(log_->request.size(), 1u);
  EXPECT_TRUE(log_->request[0].held_slot);
  EXPECT_EQ(slots_held(), 0u);
}

TEST_F(ConnectionActorTest, AQueuedConnectionStoppedNeverOpensAndNeverTakesTheSlot) {
  auto first = connect(0);
  auto second = connect(1);
  stop(second, stop_reason::client_gone);
  // Nothing to close: it ends at once, having held no slot.
  ASSERT_EQ(log_->request.size(), 1u);
  EXPECT_FALSE(log_->request[0].held_slot);
  EXPECT_EQ(log_->request[0].attempt_index, 1u);
  // The slot the first gives back goes to nobody.
  upstream(0).exchanges.at(0).respond(200, "{}");
  upstream(0).exchanges.at(0).close();
  run();
  EXPECT_EQ(upstream(0).exchanges.size(), 1u);
  EXPECT_EQ(slots_held(), 0u);
  ASSERT_EQ(log_->request.size(), 2u);
  EXPECT_TRUE(log_->request[1].held_slot);
}

TEST_F(ConnectionActorTest, ACompleteResponseGoesToTheAttemptAndTheCloseEndsTheWork) {
  connect(0);
  upstream(0).exchanges.at(0).respond(200, R"({"ok":true})");
  run();
  EXPECT_EQ(log_->attempt, (std::vector<std::string>{"granted", "whole 200"}));
  EXPECT_TRUE(log_->request.empty()) << "ended before net/ parked or closed the connection";
  upstream(0).exchanges.at(0).close();
  run();
  EXPECT_EQ(log_->request.size(), 1u);
  EXPECT_FALSE(upstream(0).exchanges.at(0).ex->cancelled) << "a complete exchange was cut";
}

// A kill is not an exit the actor can handle: the socket is closed on the way out all the same
// (a socket left open would be work nobody counts), and the request still hears of the end.
TEST_F(ConnectionActorTest, AConnectionKilledOutrightStillClosesItsSocketAndReportsTheEnd) {
  connect(0);
  auto& ex = upstream(0).exchanges.at(0);
  ASSERT_EQ(log_->connections.size(), 1u);
  caf::anon_send_exit(log_->connections[0], caf::exit_reason::kill);
  run();
  EXPECT_TRUE(ex.ex->cancelled) << "the killed connection left its socket open";
  ASSERT_EQ(log_->request.size(), 1u);
  EXPECT_TRUE(log_->request[0].held_slot);
  EXPECT_EQ(slots_held(), 0u);
}

// At the drain's end the budget refuses its waiters: the attempt is told the gateway is shutting
// down (a 503 shutting_down for its caller), not that it is overloaded.
TEST_F(ConnectionActorTest, AConnectionRefusedAtTheDrainsEndTellsItsAttemptShuttingDown) {
  connect(0);
  connect(1);
  caf::anon_send(rt_->budget, drain_now_atom::value);
  run();
  EXPECT_EQ(log_->attempt,
            (std::vector<std::string>{"granted", "fail " + std::to_string(up_fail_shutting_down)}));
  ASSERT_EQ(log_->request.size(), 1u);
  EXPECT_FALSE(log_->request[0].held_slot);
  EXPECT_EQ(upstream(0).exchanges.size(), 1u);
}

class ConnectionActorQueueTimeoutTest : public ConnectionActorTest {
 protected:
  ConnectionActorQueueTimeoutTest() : ConnectionActorTest(queue_timeout_of(200ms)) {}
  static config::gateway_config queue_timeout_of(std::chrono::milliseconds t) {
    auto cfg = tree_kit::two_upstreams(1);
    cfg.budget.queue_timeout = t;
    return cfg;
  }
};

TEST_F(ConnectionActorQueueTimeoutTest,
       AConnectionQueuedPastTheQueueTimeoutIsRefusedAndOpensNothing) {
  connect(0);
  connect(1);
  advance(199ms);
  EXPECT_EQ(log_->attempt, std::vector<std::string>{"granted"});
  advance(1ms);
  EXPECT_EQ(log_->attempt,
            (std::vector<std::string>{"granted", "fail " + std::to_string(up_fail_overloaded)}));
  ASSERT_EQ(log_->request.size(), 1u);
  EXPECT_FALSE(log_->request[0].held_slot);
  EXPECT_EQ(log_->request[0].attempt_index, 1u);
  EXPECT_EQ(upstream(0).exchanges.size(), 1u);
  EXPECT_EQ(slots_held(), 1u);
}

}  // namespace
}  // namespace tether
