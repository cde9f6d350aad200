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

// The races whose outcome depends on when things happen: the deadline, a backoff and a budget's
// grant all on the test's clock, which the request actor reads for its decisions.

// Model m alone; its retries wait the whole backoff, 50 ms (the jitter's draw pinned to its top).
config::gateway_config one_deployment_backoff_50ms() {
  auto cfg = without_fallback();
  cfg.request.retry_backoff = 50ms;
  return cfg;
}

class RequestActorClockTest : public tree_test {
 protected:
  RequestActorClockTest() : tree_test(one_deployment_backoff_50ms()) {
    rt_->backoff_jitter = [](std::int64_t n) { return n; };
  }

  static std::string forwarded_budget(const tree_kit::fake_upstream::started& ex) {
    const auto* v = net::find_header(ex.request.headers, "x-request-deadline-ms");
    return v ? *v : "(none)";
  }
};

TEST_F(RequestActorClockTest, ABackoffThatWouldEndAfterTheDeadlineStartsNoAttempt) {
  auto req = spawn_request("m", 100ms);
  auto ended = watch(req);
  advance(60ms);
  ASSERT_TRUE(channel_->calls.empty()) << "answered before the deadline";
  upstream(0).exchanges.at(0).respond(503, R"({"error":"busy"})");
  upstream(0).exchanges[0].close();
  run();
  // 40 ms left, more than the propagation margin: a retry, its backoff due at 110 ms, after the
  // deadline at 100 ms.
  ASSERT_EQ(timers_->armed(), 2u) << "expected the deadline and the backoff";
  advance(39ms);
  EXPECT_TRUE(channel_->calls.empty()) << "answered before the deadline";
  advance(20ms);
  ASSERT_EQ(channel_->calls, std::vector<std::string>{"full 504"});
  EXPECT_NE(channel_->last_body.find("deadline_exceeded"), std::string::npos)
      << channel_->last_body;
  EXPECT_EQ(upstream(0).exchanges.size(), 1u) << "an attempt started after the deadline";
  EXPECT_TRUE(*ended);
  EXPECT_EQ(timers_->armed(), 0u) << "the backoff outlived the request";
  EXPECT_EQ(slots_held(), 0u);
}

// The retry's X-Request-Deadline-Ms is what is left when it starts, on the request's clock: a
// chained gateway must not be given back the time the backoff spent.
TEST_F(RequestActorClockTest, ARetryForwardsWhatIsLeftOfTheBudgetWhenItStarts) {
  spawn_request("m", 10s);
  ASSERT_EQ(upstream(0).exchanges.size(), 1u);
  EXPECT_EQ(forwarded_budget(upstream(0).exchanges[0]), "9990");  // less the 10 ms margin
  advance(200ms);
  // A 429 asking for a second; the model's one deployment is cooling down, so the retry waits it.
  const auto& first = upstream(0).exchanges[0];
  first.events->on_connected(false);
  first.events->on_head(429, {{"content-type", "application/json"}, {"retry-after", "1"}});
  first.events->on_body(R"({"error":"slow down"})");
  first.events->on_end();
  first.close();
  run();
  advance(999ms);
  EXPECT_EQ(upstream(0).exchanges.size(), 1u) << "the retry did not wait for the Retry-After";
  advance(1ms);
  ASSERT_EQ(upstream(0).exchanges.size(), 2u);
  EXPECT_EQ(forwarded_budget(upstream(0).exchanges[1]), "8790");
  upstream(0).exchanges[1].respond(200, "{}");
  upstream(0).exchanges[1].close();
  run();
  EXPECT_EQ(channel_->calls, std::vector<std::string>{"full 200"});
}

// The first request's work ends at the moment the queued second one's deadline passes: the
// budget's grant and the deadline are both on their way. Whichever the second request's tree
// hears first, the caller gets one 504, no attempt outlives the deadline, and the slot is free
// once every socket has closed.
class RequestActorGrantRaceTest : public tree_test {
 protected:
  RequestActorGrantRaceTest() : tree_test(tree_kit::two_upstreams(1)) {}

  // The first request holds the only slot until 399 ms; the second, queued, is due at 400 ms.
  // Its work ends and the deadline fires; nothing is delivered yet.
  caf::actor queue_and_end_first_at_the_deadline() {
    spawn_request("m", 10s);
    auto second = spawn_request("m", 400ms);
    second_ended_ = watch(second);
    advance(399ms);
    EXPECT_EQ(upstream(0).exchanges.size(), 1u) << "the cap of one let two through";
    upstream(0).exchanges[0].respond(200, "{}");
    upstream(0).exchanges[0].close();
    timers_->advance(1ms);
    return second;
  }

  // The two callers share the recording channel: the first's 200 and the second's 504, in
  // either order.
  void expect_one_504_and_the_slot_back() {
    auto calls = channel_->calls;
    std::sort(calls.begin(), calls.end());
    EXPECT_EQ(calls, (std::vector<std::string>{"full 200", "full 504"}));
    for (std::size_t i = 1; i < upstream(0).exchanges.size(); ++i) {
      EXPECT_TRUE(upstream(0).exchanges[i].ex->cancelled) << "an attempt outlived its deadline";
      upstream(0).exchanges[i].close();
    }
    run();
    EXPECT_TRUE(*second_ended_);
    EXPECT_EQ(slots_held(), 0u);
    EXPECT_EQ(upstream(1).exchanges.size(), 0u) << "a fallback started after the deadline";
  }

  std::shared_ptr<bool> second_ended_;
};

TEST_F(RequestActorGrantRaceTest, TheDeadlineHeardBeforeTheGrantStartsNoExchange) {
  auto second = queue_and_end_first_at_the_deadline();
  // The second request hears its deadline before anything else runs.
  ASSERT_TRUE(sched_.prioritize(second));
  sched_.run_once();
  run();
  EXPECT_EQ(upstream(0).exchanges.size(), 1u) << "the grant reached the upstream after the 504";
  expect_one_504_and_the_slot_back();
}

TEST_F(RequestActorGrantRaceTest, TheGrantHeardBeforeTheDeadlineIsCancelledAtOnce) {
  auto second = queue_and_end_first_at_the_deadline();
  // Everything else runs first: the first's close reaches the budget, whose grant reaches the
  // second's connection, which starts its exchange; only then does the deadline land.
  auto not_second = [&](caf::resumable* job) {
    return job != dynamic_cast<caf::resumable*>(caf::actor_cast<caf::abstract_actor*>(second));
  };
  sched_.run_jobs_filtered(not_second);
  ASSERT_EQ(upstream(0).exchanges.size(), 2u) << "the grant did not start the second's exchange";
  EXPECT_FALSE(upstream(0).exchanges[1].ex->cancelled);
  run();
  expect_one_504_and_the_slot_back();
}

}  // namespace
}  // namespace tether
