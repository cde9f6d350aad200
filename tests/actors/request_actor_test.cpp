// The request actor with its real attempts, connections and budget, under CAF's test
// coordinator: the races of a request's life (deadline against the response, the caller leaving
// during a backoff, a drain mid-stream, a response after the cancel) are set up message by
// message, and each asserts what the caller got, what the upstream saw, and when the slot came
// back.
#include "actors/request_actor.hpp"

#include "tests/actors/tree_kit.hpp"

namespace tether {
namespace {

using namespace std::chrono_literals;
using tree_kit::tree_test;

class RequestActorTest : public tree_test {};

TEST_F(RequestActorTest, AResponseBeforeTheDeadlineIsTheAnswerAndTheDeadlineTimerGoes) {
  auto req = spawn_request("m", 1s);
  auto ended = watch(req);
  ASSERT_EQ(upstream(0).exchanges.size(), 1u);
  EXPECT_EQ(slots_held(), 1u);
  upstream(0).exchanges[0].respond(200, R"({"ok":true})");
  run();
  EXPECT_EQ(channel_->calls, std::vector<std::string>{"full 200"});
  EXPECT_EQ(channel_->last_body, R"({"ok":true})");
  EXPECT_FALSE(*ended) << "ended before its connection closed";
  upstream(0).exchanges[0].close();
  run();
  EXPECT_TRUE(*ended);
  EXPECT_EQ(slots_held(), 0u);
  EXPECT_EQ(timers_->armed(), 0u) << "a timer outlived the request";
  advance(2s);
  EXPECT_EQ(channel_->calls, std::vector<std::string>{"full 200"});
}

TEST_F(RequestActorTest, DeadlineAndResponseTogetherAnswerOnceAndTheSlotWaitsForTheClose) {
  auto req = spawn_request("m", 1s);
  auto ended = watch(req);
  ASSERT_EQ(upstream(0).exchanges.size(), 1u);
  // The whole response is on its way to the attempt when the deadline fires: the request hears
  // the deadline first.
  upstream(0).exchanges[0].respond(200, R"({"late":true})");
  timers_->advance(1s);
  run();
  ASSERT_EQ(channel_->calls, std::vector<std::string>{"full 504"});
  EXPECT_NE(channel_->last_body.find("deadline_exceeded"), std::string::npos)
      << channel_->last_body;
  // The exchange itself had completed (its connection goes back to the pool), and the work is
  // not over until net/ says so: the slot stays counted.
  EXPECT_FALSE(*ended);
  EXPECT_EQ(slots_held(), 1u);
  upstream(0).exchanges[0].close();
  run();
  EXPECT_TRUE(*ended);
  EXPECT_EQ(slots_held(), 0u);
  EXPECT_EQ(channel_->answers(), 1u);
}

TEST_F(RequestActorTest, AResponseAfterTheCancelIsNeverRelayed) {
  auto req = spawn_request("m", 1s);
  auto ended = watch(req);
  advance(1s);
  ASSERT_EQ(channel_->calls, std::vector<std::string>{"full 504"});
  ASSERT_TRUE(upstream(0).exchanges[0].ex->cancelled);
  // net/ had read the response before the cancel reached the socket.
  upstream(0).exchanges[0].respond(200, R"({"late":true})");
  run();
  upstream(0).exchanges[0].close();
  run();
  EXPECT_EQ(channel_->calls, std::vector<std::string>{"full 504"});
  EXPECT_TRUE(*ended);
  EXPECT_EQ(upstream(0).exchanges.size() + upstream(1).exchanges.size(), 1u)
      << "a retry started after the deadline";
}

TEST_F(RequestActorTest, TheCallerLeavingDuringTheBackoffStartsNoOtherAttempt) {
  auto req = spawn_request("m", 10s);
  auto ended = watch(req);
  upstream(0).exchanges[0].respond(503, R"({"error":"busy"})");
  upstream(0).exchanges[0].close();
  run();
  ASSERT_EQ(timers_->armed(), 2u) << "expected the deadline and the backoff";
  EXPECT_TRUE(channel_->calls.empty()) << "a retryable failure was answered";
  caf::anon_send(req, client_gone_atom::value, now_ns());
  run();
  EXPECT_TRUE(*ended) << "nothing was running, yet the request lived on";
  advance(1s);
  EXPECT_EQ(upstream(0).exchanges.size() + upstream(1).exchanges.size(), 1u);
  EXPECT_TRUE(channel_->calls.empty()) << "a caller who left was answered";
  EXPECT_EQ(slots_held(), 0u);
}

TEST_F(RequestActorTest, AfterTheBackoffTheRetryGoesOutAndItsAnswerIsTheOne) {
  auto req = spawn_request("m", 10s);
  upstream(0).exchanges[0].respond(503, R"({"error":"busy"})");
  upstream(0).exchanges[0].close();
  run();
  // The backoff (jittered, up to retry_backoff) is a timer: nothing goes out before it fires.
  EXPECT_EQ(upstream(0).exchanges.size() + upstream(1).exchanges.size(), 1u)
      << "the retry did not wait for its backoff";
  advance(100ms);
  auto& retry =
      upstream(0).exchanges.size() == 2 ? upstream(0).exchanges[1] : upstream(1).exchanges.at(0);
  retry.respond(200, R"({"second":true})");
  retry.close();
  run();
  EXPECT_EQ(channel_->calls, std::vector<std::string>{"full 200"});
  EXPECT_EQ(channel_->last_body, R"({"second":true})");
}

// Model m without its fallback: the retry goes to the same deployment.
config::gateway_config without_fallback() {
  auto cfg = tree_kit::two_upstreams();
  cfg.models[0].fallbacks.clear();
  return cfg;
}

class RequestActorOneDeploymentTest : public tree_test {
 protected:
  RequestActorOneDeploymentTest() : tree_test(without_fallback()) {}
};

TEST_F(RequestActorOneDeploymentTest, EveryAttemptSendsTheCallersBodyFromTheRequestsOneBuffer) {
  spawn_request("m", 10s);
  upstream(0).exchanges[0].respond(503, R"({"error":"busy"})");
  upstream(0).exchanges[0].close();
  run();
  advance(100ms);
  ASSERT_EQ(upstream(0).exchanges.size(), 2u);
  const auto first = upstream(0).exchanges[0].request.body.view();
  const auto retry = upstream(0).exchanges[1].request.body.view();
  EXPECT_EQ(first, R"({"model":"m","messages":[]})");
  EXPECT_EQ(retry, first);
  EXPECT_EQ(retry.data(), first.data()) << "an attempt sent a copy of the caller's body";
  upstream(0).exchanges[1].respond(200, "{}");
  upstream(0).exchanges[1].close();
  run();
  EXPECT_EQ(channel_->calls, std::vector<std::string>{"full 200"});
}

TEST_F(RequestActorTest, ADrainMidStreamEndsItWithAnErrorEventAndClosesTheUpstream) {
  auto req = spawn_request("m", 10s, true);
  auto ended = watch(req);
  auto& ex = upstream(0).exchanges.at(0);
  ex.start_stream("data: {\"n\":1}\n\n");
  run();
  ASSERT_EQ(channel_->calls, (std::vector<std::string>{"start 200", "chunk data: {\"n\":1}\n\n"}));
  {
    // The supervisor's exit, with the drain's reason.
    caf::scoped_actor supervisor{system_};
    supervisor->send_exit(req, stop_error(stop_reason::drain));
  }
  run();
  ASSERT_EQ(channel_->calls.size(), 4u);
  EXPECT_NE(channel_->calls[2].find("error"), std::string::npos) << channel_->calls[2];
  EXPECT_EQ(channel_->calls[3], "end");
  EXPECT_TRUE(ex.ex->cancelled);
  EXPECT_FALSE(*ended);
  // Events still in flight from the upstream are not relayed after the stream's end.
  ex.events->on_body("data: {\"n\":2}\n\n");
  ex.close();
  run();
  EXPECT_EQ(channel_->calls.size(), 4u);
  EXPECT_TRUE(*ended);
  EXPECT_EQ(slots_held(), 0u);
}

class RequestActorCapOneTest : public tree_test {
 protected:
  RequestActorCapOneTest() : tree_test(tree_kit::two_upstreams(1)) {}
};

TEST_F(RequestActorCapOneTest, ACallerWhoLeavesWhileQueuedNeverReachesTheUpstream) {
  auto first = spawn_request("m", 10s);
  auto second = spawn_request("m", 10s);
  auto second_ended = watch(second);
  ASSERT_EQ(upstream(0).exchanges.size(), 1u) << "the cap of one let two through";
  caf::anon_send(second, client_gone_atom::value, now_ns());
  run();
  EXPECT_TRUE(*second_ended) << "a queued request outlived its caller";
  // The slot that comes free goes to nobody: the queue is empty.
  upstream(0).exchanges[0].respond(200, "{}");
  upstream(0).exchanges[0].close();
  run();
  EXPECT_EQ(upstream(0).exchanges.size(), 1u);
  EXPECT_EQ(slots_held(), 0u);
  EXPECT_EQ(channel_->calls, std::vector<std::string>{"full 200"});
}

TEST_F(RequestActorCapOneTest, TheQueuedRequestStartsOnlyWhenTheCancelledOnesSocketHasClosed) {
  auto first = spawn_request("m", 400ms);
  auto second = spawn_request("m", 10s);
  advance(400ms);
  ASSERT_EQ(channel_->calls, std::vector<std::string>{"full 504"});
  EXPECT_EQ(upstream(0).exchanges.size(), 1u)
      << "the next request reached the upstream before the cancelled one's socket closed";
  upstream(0).exchanges[0].close();
  run();
  ASSERT_EQ(upstream(0).exchanges.size(), 2u);
  upstream(0).exchanges[1].respond(200, "{}");
  upstream(0).exchanges[1].close();
  run();
  EXPECT_EQ(channel_->calls, (std::vector<std::string>{"full 504", "full 200"}));
}

}  // namespace
}  // namespace tether
