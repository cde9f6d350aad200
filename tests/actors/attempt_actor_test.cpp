// The attempt actor's own timers, in its real tree under CAF's test coordinator: the per-try
// timeout runs from the budget's grant (not from the spawn), a timed-out try closes its socket and
// the request retries elsewhere, and a stream that goes quiet is cut by the idle timeout.
//
// Then its connection actor alone between stand-ins for its attempt and request, with the real
// budget: it asks for a slot before it opens anything, closes the socket when its attempt's tree
// goes down, and exits — freeing the slot and reporting the work's end — only once net/ says the
// socket closed.
#include "actors/attempt_actor.hpp"

#include <boost/json.hpp>
#include <functional>

#include "tests/actors/tree_kit.hpp"

namespace tether {
namespace {

using namespace std::chrono_literals;
using tree_kit::tree_test;

// ---- the attempt ------------------------------------------------------------------------------

config::gateway_config timed(std::uint32_t cap) {
  auto cfg = tree_kit::two_upstreams(cap);
  cfg.request.attempt_timeout = 200ms;
  cfg.request.stream_idle_timeout = 100ms;
  cfg.request.max_retries = 0;  // a timed-out try goes to the fallback at once
  return cfg;
}

class AttemptActorTest : public tree_test {
 protected:
  AttemptActorTest() : tree_test(timed(4)) {}
};

TEST_F(AttemptActorTest, ATimedOutTryClosesItsSocketAndTheFallbackAnswers) {
  auto req = spawn_request("m", 10s);
  ASSERT_EQ(upstream(0).exchanges.size(), 1u);
  advance(199ms);
  EXPECT_FALSE(upstream(0).exchanges[0].ex->cancelled) << "cut before its timeout";
  advance(1ms);
  EXPECT_TRUE(upstream(0).exchanges[0].ex->cancelled) << "the per-try timeout did not close it";
  // The fallback is tried once the timed-out socket is closed or at once: either way exactly one.
  upstream(0).exchanges[0].close();
  run();
  ASSERT_EQ(upstream(1).exchanges.size(), 1u);
  EXPECT_NE(upstream(1).exchanges[0].request.body.view().find("\"m2\""), std::string::npos);
  upstream(1).exchanges[0].respond(200, R"({"from":"b"})");
  upstream(1).exchanges[0].close();
  run();
  EXPECT_EQ(channel_->calls, std::vector<std::string>{"full 200"});
  EXPECT_EQ(channel_->last_body, R"({"from":"b"})");
}

TEST_F(AttemptActorTest, AStreamThatGoesQuietIsCutByTheIdleTimeout) {
  auto req = spawn_request("m", 10s, true);
  auto& ex = upstream(0).exchanges.at(0);
  ex.start_stream("data: 1\n\n");
  run();
  ASSERT_EQ(channel_->calls, (std::vector<std::string>{"start 200", "chunk data: 1\n\n"}));
  // Each event re-arms the idle timer: two gaps of 90 ms pass.
  advance(90ms);
  ex.events->on_body("data: 2\n\n");
  run();
  advance(90ms);
  EXPECT_FALSE(ex.ex->cancelled) << "cut while events still came";
  advance(10ms);
  EXPECT_TRUE(ex.ex->cancelled) << "the idle timeout did not close the socket";
  ASSERT_EQ(channel_->calls.size(), 5u);
  EXPECT_NE(channel_->calls[3].find("stream idle timeout"), std::string::npos)
      << channel_->calls[3];
  EXPECT_EQ(channel_->calls[4], "end");
  ex.close();
  run();
  EXPECT_EQ(slots_held(), 0u);
}

// An upstream read may carry several events (a stream that fell behind): they reach the caller
// as one chunk, one write, in order, and each is still read for the usage it reports.
TEST_F(AttemptActorTest, TheEventsOfOneReadReachTheCallerAsOneChunkAndEachIsRead) {
  auto req = spawn_request("m", 10s, true);
  auto& ex = upstream(0).exchanges.at(0);
  ex.start_stream("data: 1\n\n");
  run();
  const std::string usage_event =
      "data: {\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7}}\n\n";
  // Three whole events and the start of a fourth, which waits for its end.
  ex.events->on_body("data: 2\n\n" + usage_event + "data: 3\n\ndata: 4");
  run();
  ex.events->on_body("\n\n");
  ex.events->on_end();
  ex.close();
  run();
  EXPECT_EQ(channel_->calls,
            (std::vector<std::string>{"start 200", "chunk data: 1\n\n",
                                      "chunk data: 2\n\n" + usage_event + "data: 3\n\n",
                                      "chunk data: 4\n\n", "end"}));
  const auto text = rt_->stats->render();
  EXPECT_NE(text.find(R"(tether_tokens_total{key="",upstream="a",model="m",kind="completion"} 7)"),
            std::string::npos)
      << text;
  EXPECT_EQ(slots_held(), 0u);
}

// upstream_stream = "always" on upstream "a": a caller who did not ask for a stream.
config::gateway_config always_streamed() {
  auto cfg = timed(4);
  cfg.upstreams[0].upstream_stream = config::upstream_stream_mode::always;
  return cfg;
}

class AttemptActorAssemblyTest : public tree_test {
 protected:
  AttemptActorAssemblyTest() : tree_test(always_streamed()) {}
};

// The upstream is asked for a stream; its events are assembled, nothing reaches the caller
// before the stream's end, and then one whole JSON answer does (with the usage counted), while
// the stream idle timeout keeps bounding the gaps between events.
TEST_F(AttemptActorAssemblyTest, ANonStreamingCallerGetsOneWholeAnswerAssembledFromTheStream) {
  auto req = spawn_request("m", 10s);
  auto& ex = upstream(0).exchanges.at(0);
  EXPECT_TRUE(ex.request.body.view().starts_with(
      R"({"stream":true,"stream_options":{"include_usage":true},)"))
      << ex.request.body.view();
  ex.start_stream(R"(data: {"id":"c","choices":[{"index":0,"delta":{"content":"he"}}]})"
                  "\n\n");
  run();
  advance(90ms);
  ex.events->on_body(
      R"(data: {"id":"c","choices":[{"index":0,"delta":{"content":"llo"},"finish_reason":"stop"}]})"
      "\n\n"
      R"(data: {"id":"c","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7}})"
      "\n\n");
  run();
  advance(90ms);
  EXPECT_TRUE(channel_->calls.empty()) << "the caller saw part of a stream";
  ex.events->on_body("data: [DONE]\n\n");
  ex.events->on_end();
  ex.close();
  run();
  EXPECT_FALSE(ex.ex->cancelled);
  ASSERT_EQ(channel_->calls, std::vector<std::string>{"full 200"});
  EXPECT_EQ(boost::json::parse(channel_->last_body),
            boost::json::parse(R"({"id":"c","object":"chat.completion","choices":[{"index":0,
              "message":{"content":"hello"},"finish_reason":"stop"}],
              "usage":{"prompt_tokens":5,"completion_tokens":7}})"));
  const auto* type = net::find_header(channel_->last_headers, "content-type");
  ASSERT_NE(type, nullptr);
  EXPECT_EQ(*type, "application/json");
  const auto text = rt_->stats->render();
  EXPECT_NE(text.find(R"(tether_tokens_total{key="",upstream="a",model="m",kind="completion"} 7)"),
            std::string::npos)
      << text;
  EXPECT_EQ(slots_held(), 0u);
}

// An engine that goes quiet mid-answer: the stream idle timeout closes its socket, and since
// nothing was committed to the caller the attempt fails over (here to the fallback).
TEST_F(AttemptActorAssemblyTest, AnAssembledAnswerThatGoesQuietIsCutByTheIdleTimeout) {
  auto req = spawn_request("m", 10s);
  auto& ex = upstream(0).exchanges.at(0);
  ex.start_stream(R"(data: {"id":"c","choices":[{"index":0,"delta":{"content":"he"}}]})"
                  "\n\n");
  run();
  advance(99ms);
  EXPECT_FALSE(ex.ex->cancelled);
  advance(1ms);
  EXPECT_TRUE(ex.ex->cancelled) << "the idle timeout did not bound the assembled stream";
  ex.close();
  run();
  ASSERT_EQ(upstream(1).exchanges.size(), 1u);
  upstream(1).exchanges[0].respond(200, R"({"from":"b"})");
  upstream(1).exchanges[0].close();
  run();
  EXPECT_EQ(channel_->calls, std::vector<std::string>{"full 200"});
  EXPECT_EQ(channel_->last_body, R"({"from":"b"})");
}

class AttemptActorQueuedTest : public tree_test {
 protected:
  AttemptActorQueuedTest() : tree_test(timed(1)) {}
};

TEST_F(AttemptActorQueuedTest, ThePerTryClockStartsAtTheGrantNotWhileQueued) {
  auto first = spawn_request("m", 10s);
  auto second = spawn_request("m", 10s);
  ASSERT_EQ(upstream(0).exchanges.size(), 1u);
  advance(150ms);
  upstream(0).exchanges[0].respond(200, "{}");
  upstream(0).exchanges[0].close();
  run();
  ASSERT_EQ(upstream(0).exchanges.size(), 2u) << "the queued request did not get the slot";
  // 300 ms after its spawn, 150 ms after its grant: within its 200 ms try.
  advance(150ms);
  EXPECT_FALSE(upstream(0).exchanges[1].ex->cancelled) << "the time in the queue was counted";
  advance(50ms);
  EXPECT_TRUE(upstream(0).exchanges[1].ex->cancelled);
}

// ---- the release grace ------------------------------------------------------------------------

// "m" on upstream "a", which names an engine (or not), with one slot.
config::gateway_config one_slot_engine(config::engine_kind engine) {
  auto cfg = tree_kit::two_upstreams(1);
  cfg.upstreams[0].engine = engine;
  cfg.upstreams[0].release_grace_max = 500ms;
  cfg.request.max_retries = 0;
  return cfg;
}

// A stream with a token every 30 ms: the engine's decode step as tether observes it.
void stream_tokens(tree_kit::fake_upstream::started& ex, int tokens,
                   const std::function<void(std::chrono::nanoseconds)>& advance) {
  ex.start_stream("data: {\"t\":0}\n\n");
  for (int i = 1; i < tokens; ++i) {
    advance(30ms);
    ex.events->on_body("data: {\"t\":" + std::to_string(i) + "}\n\n");
  }
}

class ReleaseGraceTest : public tree_test {
 protected:
  explicit ReleaseGraceTest(config::engine_kind engine = config::engine_kind::llamacpp)
      : tree_test(one_slot_engine(engine)) {}
  std::function<void(std::chrono::nanoseconds)> advancer() {
    return [this](std::chrono::nanoseconds by) { advance(by); };
  }
};

// The caller leaves a stream; its connection is closed at once, but the slot goes back only three
// observed decode steps and the slack later (140 ms): the waiting request reaches the upstream
// then, not at the close.
TEST_F(ReleaseGraceTest, ACutStreamsSlotGoesBackThreeDecodeStepsAfterTheClose) {
  auto first = spawn_request("m", 10s, true);
  auto second = spawn_request("m", 10s, true);
  ASSERT_EQ(upstream(0).exchanges.size(), 1u);
  stream_tokens(upstream(0).exchanges[0], 5, advancer());
  run();
  caf::anon_send(first, client_gone_atom::value, now_ns());
  run();
  ASSERT_TRUE(upstream(0).exchanges[0].ex->cancelled);
  upstream(0).exchanges[0].close();
  run();
  EXPECT_EQ(upstream(0).exchanges.size(), 1u) << "the next request was let in at the close";
  advance(139ms);
  EXPECT_EQ(upstream(0).exchanges.size(), 1u) << "let in before three decode steps and the slack";
  advance(1ms);
  EXPECT_EQ(upstream(0).exchanges.size(), 2u) << "not let in when the grace ended";
}

// Before any step was observed the grace is the bound.
TEST_F(ReleaseGraceTest, WithNoStepObservedTheGraceIsTheBound) {
  auto first = spawn_request("m", 10s);
  auto second = spawn_request("m", 10s);
  ASSERT_EQ(upstream(0).exchanges.size(), 1u);
  upstream(0).exchanges[0].events->on_connected(false);  // the request went out; no answer yet
  caf::anon_send(first, client_gone_atom::value, now_ns());
  run();
  upstream(0).exchanges[0].close();
  run();
  advance(499ms);
  EXPECT_EQ(upstream(0).exchanges.size(), 1u);
  advance(1ms);
  EXPECT_EQ(upstream(0).exchanges.size(), 2u);
}

// An answer that ended needs no grace: the engine is done with it.
TEST_F(ReleaseGraceTest, AnAnswerThatEndedGivesItsSlotBackAtTheClose) {
  auto first = spawn_request("m", 10s, true);
  auto second = spawn_request("m", 10s, true);
  stream_tokens(upstream(0).exchanges[0], 3, advancer());
  upstream(0).exchanges[0].events->on_end();
  upstream(0).exchanges[0].close();
  run();
  EXPECT_EQ(upstream(0).exchanges.size(), 2u);
}

class ReleaseGraceOpenaiTest : public ReleaseGraceTest {
 protected:
  ReleaseGraceOpenaiTest() : ReleaseGraceTest(config::engine_kind::openai) {}
};

// engine = "openai" is nothing engine-specific: the slot goes back at the close, as it always did.
TEST_F(ReleaseGraceOpenaiTest, WithNoEngineNamedTheSlotGoesBackAtTheClose) {
  auto first = spawn_request("m", 10s, true);
  auto second = spawn_request("m", 10s, true);
  stream_tokens(upstream(0).exchanges[0], 5, advancer());
  run();
  caf::anon_send(first, client_gone_atom::value, now_ns());
  run();
  upstream(0).exchanges[0].close();
  run();
  EXPECT_EQ(upstream(0).exchanges.size(), 2u);
}

// ---- its connection ---------------------------------------------------------------------------

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
            std::int64_t, std::int64_t, std::int64_t) {
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
