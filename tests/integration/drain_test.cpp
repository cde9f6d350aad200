// Draining (SIGTERM) when in-flight work outlasts drain_timeout_ms: at the timeout, and not
// before, every upstream connection closes; the streams end with an SSE error event, the callers
// still queued for a slot get 503 shutting_down, and the process exits 0 with no slot left.
#include <gtest/gtest.h>

#include <csignal>
#include <memory>
#include <vector>

#include "tests/integration/harness.hpp"
#include "tests/support/leaving_client.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

constexpr double drain_ms = 800;
// How long after the drain timeout the upstream may see the close: the cancel's way through the
// actors and the io thread on a loaded 2-core machine; far below the streams' own 20 s.
constexpr double close_after_drain_ms = TETHER_SANITIZED ? 1000.0 : 300.0;

TEST(DrainTest, AtTheDrainTimeoutStreamsAndQueuedCallersAreEndedAndNoSlotIsLeft) {
  mock_server mock;
  auto cfg = gateway_config(
      mock, "deadline_ms = 60000\nattempt_timeout_ms = 60000\nstream_idle_timeout_ms = 60000",
      model_entry("long", "mock-stream-1000x20") + model_entry("hang", "mock-hang"), "",
      "drain_timeout_ms = " + std::to_string(static_cast<int>(drain_ms)));
  cfg.replace(cfg.find("max_in_flight = 64"), std::string("max_in_flight = 64").size(),
              "max_in_flight = 2");
  gateway_process gw{cfg};

  // Two streams hold both slots; two callers queue behind them.
  std::vector<std::unique_ptr<leaving_client>> streams;
  for (int i = 0; i < 2; ++i) {
    streams.push_back(std::make_unique<leaving_client>(
        gw.port(), "/v1/chat/completions", chat_body("long", true),
        header_map{{"x-request-id", "stream-" + std::to_string(i)}}));
    ASSERT_TRUE(streams.back()->wait_events(2, 5s)) << "stream " << i << " never flowed";
  }
  std::vector<std::unique_ptr<leaving_client>> queued;
  for (int i = 0; i < 2; ++i) {
    queued.push_back(std::make_unique<leaving_client>(
        gw.port(), "/v1/chat/completions", chat_body("hang"),
        header_map{{"x-request-id", "queued-" + std::to_string(i)}}));
  }
  ASSERT_TRUE(await_metric(gw.port(), "tether_queue_depth", 2, 5s));

  const double signalled = epoch_ms_now();
  gw.process().send_signal(SIGTERM);
  ASSERT_TRUE(gw.process().wait_for_line(std::regex("received SIGTERM, draining"), 5s));
  // While draining, and before the timeout: not ready, and no new work.
  EXPECT_EQ(request("GET", gw.port(), "/readyz").status, 503);
  auto late = request("POST", gw.port(), "/v1/chat/completions", chat_body("hang"));
  EXPECT_EQ(late.status, 503);
  EXPECT_EQ(str(late.json().at("error").at("code")), "shutting_down");

  for (auto& s : streams) ASSERT_TRUE(s->wait_end(10s)) << "a stream never ended";
  for (auto& q : queued) ASSERT_TRUE(q->wait_end(10s)) << "a queued caller never got an answer";

  // The upstream saw both streams' connections close at the drain timeout.
  auto stats = mock.wait_for_stats(
      [](const auto& s) {
        for (const auto& e : mock_log(s))
          if (str(e.at("outcome")) == "in_progress") return false;
        return true;
      },
      5s);
  ASSERT_EQ(mock_log(stats).size(), 2u) << "only the two streams may have reached the mock";
  for (int i = 0; i < 2; ++i) {
    auto es = entries_of(stats, "stream-" + std::to_string(i));
    ASSERT_EQ(es.size(), 1u);
    ASSERT_EQ(str(es[0].at("outcome")), "closed_by_client");
    const double closed = num(es[0].at("closed_ms"));
    std::printf("stream-%d: upstream closed %.1f ms after SIGTERM\n", i, closed - signalled);
    EXPECT_GE(closed, signalled + drain_ms) << "closed before the drain timeout";
    EXPECT_LT(closed, signalled + drain_ms + close_after_drain_ms) << "closed late";
  }
  EXPECT_EQ(stats.at("connections_open").as_int64(), 0);

  // The streams: 200, some events, then one error event and the end of the stream.
  for (auto& s : streams) {
    EXPECT_EQ(s->status(), 200);
    EXPECT_TRUE(s->complete()) << "the stream was cut instead of ended: " << s->body();
    stream_result as_result;
    as_result.body = s->body();
    auto data = as_result.sse_data();
    ASSERT_GE(data.size(), 3u) << s->body();
    auto last = boost::json::parse(data.back()).as_object();
    EXPECT_EQ(str(last.at("error").at("code")), "stream_interrupted");
    EXPECT_NE(str(last.at("error").at("message")).find("shutting down"), std::string::npos)
        << data.back();
  }
  // The queued callers: 503 shutting_down, never having reached the upstream.
  for (auto& q : queued) {
    EXPECT_EQ(q->status(), 503) << q->body();
    auto body = boost::json::parse(q->body()).as_object();
    EXPECT_EQ(str(body.at("error").at("code")), "shutting_down");
  }

  auto exit_code = gw.process().wait_exit(10s);
  ASSERT_TRUE(exit_code) << "the process did not exit after the drain";
  EXPECT_EQ(*exit_code, 0);
  // ", 0 budget" cannot match ", 10 budget".
  auto drained = gw.process().wait_for_line(
      std::regex(
          R"(drained: (\d+) request\(s\) cancelled at the drain timeout, 0 budget slot\(s\) left)"),
      1s);
  ASSERT_TRUE(drained) << gw.process().output();
  EXPECT_EQ(drained->groups.at(1), "4");
  for (const char* id : {"queued-0", "queued-1"}) {
    auto line = access_line(gw, id, 1s);
    ASSERT_TRUE(line) << id;
    EXPECT_EQ(str(line->at("outcome")), "shutting_down");
    EXPECT_EQ(line->at("status").as_int64(), 503);
  }
}

}  // namespace
}  // namespace tether::test
