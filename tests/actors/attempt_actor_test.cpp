// The attempt actor's own timers, in its real tree under CAF's test coordinator: the per-try
// timeout runs from the budget's grant (not from the spawn), a timed-out try closes its socket and
// the request retries elsewhere, and a stream that goes quiet is cut by the idle timeout.
#include "actors/attempt_actor.hpp"

#include "tests/actors/tree_kit.hpp"

namespace tether {
namespace {

using namespace std::chrono_literals;
using tree_kit::tree_test;

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
  EXPECT_NE(text.find("tether_tokens_total{key=\"\",upstream=\"a\",kind=\"completion\"} 7"),
            std::string::npos)
      << text;
  EXPECT_EQ(slots_held(), 0u);
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

}  // namespace
}  // namespace tether
