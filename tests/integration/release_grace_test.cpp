// The budget holds until the engine has let go (docs/contract.md, "The work ends in the engine"):
// a streaming caller leaves an upstream that names an engine; tether closes the upstream
// connection at once but keeps the budget slot for two of the engine's observed decode steps
// (bounded by release_grace_max_ms), so the next request reaches the upstream only then. The
// mock streams an event every 100 ms, which tether observes as the decode step. With
// engine = "openai" the slot goes back at the close, as always.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <future>
#include <string>

#include "tests/integration/harness.hpp"
#include "tests/support/leaving_client.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

constexpr double step_ms = 100;  // the mock's event gap (mock-stream-40x100)
// What the slot is held for after the close: three of those steps and the slack
// (actors/policy/engine/release_grace.hpp).
constexpr double grace_ms = 3 * step_ms + 50;

// One upstream of one slot, with the engine and grace bound given; the stream's model "slow"
// and an immediate one, "fast".
std::string one_slot_config(const mock_server& mock, const std::string& engine, int grace_max_ms,
                            const std::string& server_keys = "",
                            const std::string& upstream_keys = "") {
  auto cfg = gateway_config(mock, "deadline_ms = 30000\nmax_retries = 0",
                            model_entry("slow", "mock-stream-40x100") + model_entry("fast", "mock"),
                            "", server_keys);
  const std::string from = "max_in_flight = 64";
  cfg.replace(cfg.find(from), from.size(),
              "max_in_flight = 1\nengine = \"" + engine +
                  "\"\nupstream_stream = \"as_requested\"\nrelease_grace_max_ms = " +
                  std::to_string(grace_max_ms) + "\n" + upstream_keys);
  return cfg;
}

struct observed {
  double released_after_close_ms = 0;  // the access log: engine_released_ms - work_ended_ms
  double next_after_close_ms = 0;      // the mock: the next request's arrival - the cut's close
};

// A streams; B, sent while A holds the slot, waits for it; A's caller leaves.
observed cut_stream_then_next(mock_server& mock, gateway_process& gw) {
  stream_options leave;
  leave.close_after = 700ms;  // several events: the decode step is observed
  auto a = std::async(std::launch::async, [&] {
    return stream_request("POST", gw.port(), "/v1/chat/completions", chat_body("slow", true),
                          {{"x-request-id", "cut"}}, leave);
  });
  // B is queued behind A once A's stream has begun at the mock.
  mock.wait_for_stats([](const auto& s) { return entries_of(s, "cut").size() == 1; });
  auto b = request("POST", gw.port(), "/v1/chat/completions", chat_body("fast"),
                   {{"x-request-id", "next"}});
  EXPECT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(a.get().end, stream_end::stopped);

  observed out;
  auto line = access_line(gw, "cut");
  EXPECT_TRUE(line);
  if (!line) return out;
  const auto& attempts = line->at("attempts").as_array();
  EXPECT_EQ(attempts.size(), 1u);
  if (attempts.empty()) return out;
  out.released_after_close_ms =
      num(attempts[0].at("engine_released_ms")) - num(line->at("work_ended_ms"));
  const auto stats = mock.wait_for_stats([](const auto& s) {
    auto cut = entries_of(s, "cut");
    return cut.size() == 1 && !cut[0].at("closed_ms").is_null() &&
           entries_of(s, "next").size() == 1;
  });
  const auto cut = entries_of(stats, "cut");
  const auto next = entries_of(stats, "next");
  EXPECT_EQ(cut.size(), 1u);
  EXPECT_EQ(next.size(), 1u);
  if (cut.size() != 1 || next.size() != 1 || cut[0].at("closed_ms").is_null()) return out;
  out.next_after_close_ms = num(next[0].at("started_ms")) - num(cut[0].at("closed_ms"));
  std::printf("slot back %.1f ms after the close; the next request at the upstream %.1f ms after\n",
              out.released_after_close_ms, out.next_after_close_ms);
  return out;
}

TEST(ReleaseGraceTest, ACutStreamsSlotIsHeldForThreeDecodeStepsAfterTheClose) {
  mock_server mock;
  gateway_process gw(one_slot_config(mock, "llamacpp", 500));
  const auto o = cut_stream_then_next(mock, gw);
  // Three observed steps of 100 ms (the smoothed gap between the events tether relayed) and the
  // 50 ms slack.
  EXPECT_GE(o.released_after_close_ms, grace_ms * 0.8);
  EXPECT_LE(o.released_after_close_ms, grace_ms * 1.3);
  // The next request reached the upstream no earlier than that (less the mock's own lag in
  // seeing the close).
  EXPECT_GE(o.next_after_close_ms, grace_ms * 0.8 - 25);
}

TEST(ReleaseGraceTest, TheGraceIsBoundedByReleaseGraceMax) {
  mock_server mock;
  gateway_process gw(one_slot_config(mock, "llamacpp", 120));
  const auto o = cut_stream_then_next(mock, gw);
  EXPECT_GE(o.released_after_close_ms, 120);
  EXPECT_LE(o.released_after_close_ms, 120 + 40);
  EXPECT_GE(o.next_after_close_ms, 120 - 25);
}

TEST(ReleaseGraceTest, WithEngineOpenaiTheSlotGoesBackAtTheClose) {
  mock_server mock;
  gateway_process gw(one_slot_config(mock, "openai", 500));
  const auto o = cut_stream_then_next(mock, gw);
  EXPECT_LE(o.released_after_close_ms, 20);
  EXPECT_LT(o.next_after_close_ms, step_ms * 0.8);
}

// With metrics_path set the engine's own running count decides: the engine metrics actor polls
// when the held attempt is expected let go (its three decode steps and the slack), and the mock,
// which stops at the close, counts only what it still works on. The interval is far longer than
// the test, so only that extra poll can release the slot before its bound.
const std::string engine_polled = "metrics_path = \"/metrics\"\nmetrics_interval_ms = 60000\n";

// Waits (3 s at most) until the gateway has read the engine's counts once.
void await_engine_counts(gateway_process& gw) {
  ASSERT_TRUE(await_metric(gw.port(), "tether_engine_requests{upstream=\"mock\",state=\"running\"}",
                           0, 3s));
}

TEST(ReleaseGraceTest, WithEngineMetricsTheSlotGoesBackWhenTheEnginesCountSaysItLetGo) {
  mock_server mock;
  gateway_process gw(one_slot_config(mock, "llamacpp", 3000, "", engine_polled));
  await_engine_counts(gw);
  const auto o = cut_stream_then_next(mock, gw);
  // Not before the steps' grace (the poll is sent then), long before the bound.
  EXPECT_GE(o.released_after_close_ms, grace_ms * 0.8);
  EXPECT_LE(o.released_after_close_ms, grace_ms + 400);
  EXPECT_GE(o.next_after_close_ms, grace_ms * 0.8 - 25);
}

// Another client's request in the engine makes its count exceed tether's live work: the held
// attempt cannot be told apart from it, so its slot is held to the bound.
TEST(ReleaseGraceTest, WorkOfAnotherClientInTheEngineHoldsTheSlotToItsBound) {
  mock_server mock;
  gateway_process gw(one_slot_config(mock, "llamacpp", 1500, "", engine_polled));
  await_engine_counts(gw);
  leaving_client direct{mock.port(), "/v1/chat/completions", chat_body("mock-hang")};
  mock.wait_for_stats([](const auto& s) { return s.at("active").as_int64() == 1; });
  const auto o = cut_stream_then_next(mock, gw);
  direct.leave();
  EXPECT_GE(o.released_after_close_ms, 1500);
  EXPECT_LE(o.released_after_close_ms, 1500 + 100);
  EXPECT_GE(o.next_after_close_ms, 1500 - 25);
}

// The drain's cut is a cancellation like the others: the slot is held for the grace, and the
// drain (and the process) ends when the grace does, not later.
TEST(ReleaseGraceTest, TheDrainEndsWhenTheGraceDoesNotLater) {
  mock_server mock;
  gateway_process gw(one_slot_config(mock, "llamacpp", 500, "drain_timeout_ms = 0"));
  stream_options cut;
  cut.timeout = 10s;
  auto a = std::async(std::launch::async, [&] {
    return stream_request("POST", gw.port(), "/v1/chat/completions", chat_body("slow", true),
                          {{"x-request-id", "drained"}}, cut);
  });
  // Several events, so the step is observed; then the drain, which cuts the stream at once
  // (drain_timeout_ms = 0).
  mock.wait_for_stats([](const boost::json::object& s) {
    auto e = entries_of(s, "drained");
    return e.size() == 1 && num(e[0].at("chunks_sent")) >= 6;
  });
  gw.process().send_signal(SIGTERM);
  EXPECT_EQ(gw.process().wait_exit(5s), std::optional<int>(0));
  const double exited = epoch_ms_now();
  a.get();
  auto line = access_line(gw, "drained", 1s);
  ASSERT_TRUE(line);
  const auto& attempts = line->at("attempts").as_array();
  ASSERT_EQ(attempts.size(), 1u);
  const double grace = num(attempts[0].at("engine_released_ms")) - num(line->at("work_ended_ms"));
  EXPECT_GE(grace, grace_ms * 0.8);
  EXPECT_LE(grace, grace_ms * 1.3);
  const auto stats = mock.wait_for_stats([](const auto& s) {
    auto e = entries_of(s, "drained");
    return e.size() == 1 && !e[0].at("closed_ms").is_null();
  });
  const auto e = entries_of(stats, "drained");
  ASSERT_EQ(e.size(), 1u);
  ASSERT_FALSE(e[0].at("closed_ms").is_null());
  // The process was gone within the grace after the close, plus its own shutdown.
  std::printf("drain: slot back %.1f ms after the close; the process gone %.1f ms after it\n",
              grace, exited - num(e[0].at("closed_ms")));
  EXPECT_LE(exited - num(e[0].at("closed_ms")), grace + 400);
}

}  // namespace
}  // namespace tether::test
