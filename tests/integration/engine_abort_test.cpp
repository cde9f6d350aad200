// Engine abort (docs/contract.md, "The work ends in the engine"): SGLang keeps generating a
// non-streaming request after its caller's connection closed, so with engine = "sglang" tether
// names each attempt's work by the body's `rid` and, when it cuts the attempt, sends
// `POST /abort_request {"rid"}`. The mock plays SGLang (--sglang): its generation of a
// non-streaming request runs on after the close and stops only at an abort of its rid.
#include <gtest/gtest.h>

#include <string>

#include "tests/integration/harness.hpp"
#include "tests/support/leaving_client.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

// What the abort may take after the cut: one local HTTP exchange, on two shared cores.
constexpr double abort_bound_ms = TETHER_SANITIZED ? 250 : 100;
// The generation's planned length: far beyond every bound here, so a generation that stopped
// within them was stopped by the abort.
constexpr const char* slow_model = "mock-delay-5000";

std::string config(const mock_server& mock, const std::string& engine,
                   const std::string& request_keys = "deadline_ms = 30000\nmax_retries = 0",
                   int max_in_flight = 4) {
  auto cfg = gateway_config(mock, request_keys,
                            model_entry("slow", slow_model) + model_entry("fast", "mock"));
  const std::string from = "max_in_flight = 64";
  cfg.replace(cfg.find(from), from.size(),
              "max_in_flight = " + std::to_string(max_in_flight) + "\nengine = \"" + engine +
                  "\"\nupstream_stream = \"as_requested\"");
  return cfg;
}

mock_options sglang_mock() {
  mock_options o;
  o.extra_args = {"--sglang"};
  return o;
}

const boost::json::array& generations(const boost::json::object& stats) {
  return stats.at("sglang").at("generations").as_array();
}
const boost::json::array& aborts(const boost::json::object& stats) {
  return stats.at("sglang").at("aborts").as_array();
}

const boost::json::object* find_rid(const boost::json::array& list, const std::string& rid) {
  for (const auto& e : list) {
    if (str(e.at("rid")) == rid) return &e.as_object();
  }
  return nullptr;
}

// A non-streaming caller whose request the mock is generating leaves; returns when it left
// (epoch ms) once the gateway has logged the request.
double caller_leaves(mock_server& mock, gateway_process& gw, const std::string& id) {
  leaving_client caller(gw.port(), "/v1/chat/completions", chat_body("slow"),
                        {{"x-request-id", id}});
  mock.wait_for_stats([&](const auto& s) { return entries_of(s, id).size() == 1; });
  const auto left = epoch_ms(caller.leave());
  EXPECT_TRUE(access_line(gw, id));
  return left;
}

TEST(EngineAbortTest, ACallerWhoLeavesHasItsGenerationAbortedByRid) {
  mock_server mock(sglang_mock());
  gateway_process gw(config(mock, "sglang"));
  const auto left = caller_leaves(mock, gw, "left");
  const auto stats =
      mock.wait_for_stats([](const auto& s) { return find_rid(aborts(s), "left.0") != nullptr; });
  const auto* gen = find_rid(generations(stats), "left.0");
  const auto* abort = find_rid(aborts(stats), "left.0");
  ASSERT_TRUE(gen) << "the body tether sent named no rid left.0";
  ASSERT_TRUE(abort) << "no /abort_request for left.0";
  EXPECT_TRUE(abort->at("found").as_bool());
  EXPECT_LE(num(abort->at("at_ms")) - left, abort_bound_ms);
  EXPECT_EQ(str(gen->at("stopped_by")), "abort");
  EXPECT_LE(num(gen->at("stopped_ms")) - left, abort_bound_ms);
  std::printf("abort at the engine %.1f ms after the caller left\n",
              num(abort->at("at_ms")) - left);
  EXPECT_TRUE(
      await_metric(gw.port(), R"(tether_engine_aborts_total{upstream="mock",result="sent"})", 1));
  EXPECT_EQ(metric(gw.port(), R"(tether_engine_aborts_total{upstream="mock",result="failed"})"), 0);
  // The caller's outcome is what it is for any engine.
  auto line = access_line(gw, "left");
  ASSERT_TRUE(line);
  EXPECT_EQ(str(line->at("outcome")), "client_disconnected");
}

TEST(EngineAbortTest, TheDeadlineAbortsTheGenerationToo) {
  mock_server mock(sglang_mock());
  gateway_process gw(config(mock, "sglang", "deadline_ms = 400\nmax_retries = 0"));
  const auto sent = epoch_ms_now();
  auto r = request("POST", gw.port(), "/v1/chat/completions", chat_body("slow"),
                   {{"x-request-id", "late"}});
  EXPECT_EQ(r.status, 504) << r.body;
  const auto stats =
      mock.wait_for_stats([](const auto& s) { return find_rid(aborts(s), "late.0") != nullptr; });
  const auto* gen = find_rid(generations(stats), "late.0");
  const auto* abort = find_rid(aborts(stats), "late.0");
  ASSERT_TRUE(gen);
  ASSERT_TRUE(abort) << "no /abort_request for late.0";
  EXPECT_TRUE(abort->at("found").as_bool());
  EXPECT_LE(num(abort->at("at_ms")) - sent, 400 + abort_bound_ms);
  EXPECT_EQ(str(gen->at("stopped_by")), "abort");
  auto line = access_line(gw, "late");
  ASSERT_TRUE(line);
  EXPECT_EQ(num(line->at("status")), 504);
  EXPECT_EQ(str(line->at("outcome")), "deadline_exceeded");
}

// engine = "openai": the body goes as the caller sent it (no rid: the mock starts no named
// generation) and no abort follows a cut.
TEST(EngineAbortTest, WithEngineOpenaiNoRidAndNoAbort) {
  mock_server mock(sglang_mock());
  gateway_process gw(config(mock, "openai"));
  caller_leaves(mock, gw, "plain");
  // The abort would have gone at the close, which the mock has seen by now; a little longer for
  // one in flight.
  const auto stats = mock.wait_for_stats(
      [](const auto& s) {
        auto e = entries_of(s, "plain");
        return !aborts(s).empty() || (e.size() == 1 && !e[0].at("closed_ms").is_null());
      },
      5s);
  const auto later = mock.wait_for_stats([](const auto& s) { return !aborts(s).empty(); }, 300ms);
  EXPECT_TRUE(aborts(later).empty());
  EXPECT_TRUE(generations(stats).empty()) << "the body had a rid";
  EXPECT_FALSE(
      metric_if_present(gw.port(), R"(tether_engine_aborts_total{upstream="mock",result="sent"})"));
  auto r = request("POST", gw.port(), "/v1/chat/completions", chat_body("fast"));
  EXPECT_EQ(r.status, 200) << r.body;
}

// An abort the engine refuses is counted as failed, not retried, and nothing else changes.
TEST(EngineAbortTest, AFailedAbortIsCountedAndNothingElseBreaks) {
  mock_server mock(sglang_mock());
  ASSERT_EQ(request("POST", mock.port(), "/_abort_status?status=500", "").status, 200);
  gateway_process gw(config(mock, "sglang"));
  caller_leaves(mock, gw, "refused");
  EXPECT_TRUE(
      await_metric(gw.port(), R"(tether_engine_aborts_total{upstream="mock",result="failed"})", 1));
  EXPECT_EQ(metric(gw.port(), R"(tether_engine_aborts_total{upstream="mock",result="sent"})"), 0);
  const auto stats = mock.stats();
  EXPECT_EQ(aborts(stats).size(), 1u) << "the failed abort was retried";
  const auto* gen = find_rid(generations(stats), "refused.0");
  ASSERT_TRUE(gen);
  EXPECT_TRUE(gen->at("stopped_ms").is_null()) << "the refused abort stopped the generation";
  auto line = access_line(gw, "refused");
  ASSERT_TRUE(line);
  EXPECT_EQ(str(line->at("outcome")), "client_disconnected");
  // The gateway goes on: the next request is answered, and its rid is its own.
  auto r = request("POST", gw.port(), "/v1/chat/completions", chat_body("fast"),
                   {{"x-request-id", "after"}});
  EXPECT_EQ(r.status, 200) << r.body;
}

// Only a request that went out is aborted: a caller who leaves while queued for the slot never
// reached the engine, and nothing is sent for it.
TEST(EngineAbortTest, ACallerWhoLeavesWhileQueuedIsNotAborted) {
  mock_server mock(sglang_mock());
  gateway_process gw(config(mock, "sglang", "deadline_ms = 30000\nmax_retries = 0", 1));
  leaving_client holder(gw.port(), "/v1/chat/completions", chat_body("slow"),
                        {{"x-request-id", "hold"}});
  mock.wait_for_stats([](const auto& s) { return entries_of(s, "hold").size() == 1; });
  {
    leaving_client queued(gw.port(), "/v1/chat/completions", chat_body("slow"),
                          {{"x-request-id", "queued"}});
    ASSERT_TRUE(await_metric(gw.port(), "tether_queue_depth", 1));
    queued.leave();
    ASSERT_TRUE(access_line(gw, "queued"));
  }
  holder.leave();
  const auto stats =
      mock.wait_for_stats([](const auto& s) { return find_rid(aborts(s), "hold.0") != nullptr; });
  ASSERT_TRUE(find_rid(aborts(stats), "hold.0"));
  EXPECT_FALSE(find_rid(aborts(stats), "queued.0")) << "an abort for a request never sent";
  EXPECT_EQ(aborts(stats).size(), 1u);
  EXPECT_TRUE(entries_of(stats, "queued").empty());
  EXPECT_TRUE(
      await_metric(gw.port(), R"(tether_engine_aborts_total{upstream="mock",result="sent"})", 1));
}

}  // namespace
}  // namespace tether::test
