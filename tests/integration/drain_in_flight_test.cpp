// Draining (SIGTERM) when a non-streaming request is still waiting for its upstream at the drain
// timeout (contract, "Draining" and "Response headers on model responses"): the caller gets 503
// shutting_down, told that a retry is worth it (`x-should-retry: true`, `Retry-After: 1`,
// `retry-after-ms: 1000`: another gateway behind the same address has room), Anthropic-shaped
// with `overloaded_error` on /v1/messages; and the upstream connection is closed at the timeout.
#include <gtest/gtest.h>

#include <csignal>
#include <future>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

constexpr double drain_ms = 600;
// How long after the drain timeout the answer and the upstream's close may come: the cancel's
// way through the actors and the io thread on a loaded 2-core machine; far below the upstream's
// own never.
constexpr double after_drain_ms = TETHER_SANITIZED ? 1000.0 : 300.0;

const std::string messages_body =
    R"({"model":"hang","max_tokens":16,"messages":[{"role":"user","content":"hi"}]})";

void expect_retry_advice(const http_response& r) {
  EXPECT_EQ(r.status, 503) << r.body;
  ASSERT_NE(r.header("x-tether-outcome"), nullptr);
  EXPECT_EQ(*r.header("x-tether-outcome"), "shutting_down");
  ASSERT_NE(r.header("x-should-retry"), nullptr);
  EXPECT_EQ(*r.header("x-should-retry"), "true");
  ASSERT_NE(r.header("retry-after"), nullptr);
  EXPECT_EQ(*r.header("retry-after"), "1");
  ASSERT_NE(r.header("retry-after-ms"), nullptr);
  EXPECT_EQ(*r.header("retry-after-ms"), "1000");
}

TEST(DrainInFlightTest, ANonStreamingRequestCutByTheDrainTimeoutIsTold503AndToRetry) {
  mock_server mock;
  gateway_process gw{
      gateway_config(mock, "deadline_ms = 60000\nattempt_timeout_ms = 60000\nmax_retries = 0",
                     model_entry("hang", "mock-hang"), "",
                     "drain_timeout_ms = " + std::to_string(static_cast<int>(drain_ms)))};

  auto chat = std::async(std::launch::async, [&] {
    return request("POST", gw.port(), "/v1/chat/completions", chat_body("hang"),
                   {{"x-request-id", "chat"}}, 10s);
  });
  auto messages = std::async(std::launch::async, [&] {
    return request("POST", gw.port(), "/v1/messages", messages_body, {{"x-request-id", "messages"}},
                   10s);
  });
  auto busy = mock.wait_for_stats([](const auto& s) { return s.at("active").as_int64() == 2; });
  ASSERT_EQ(busy.at("active").as_int64(), 2) << "both requests must be at the upstream";

  const double signalled = epoch_ms_now();
  gw.process().send_signal(SIGTERM);
  ASSERT_TRUE(gw.process().wait_for_line(std::regex("received SIGTERM, draining"), 5s));

  auto chat_answer = chat.get();
  const double chat_at = epoch_ms_now();
  auto messages_answer = messages.get();
  const double messages_at = epoch_ms_now();
  for (const double at : {chat_at, messages_at}) {
    EXPECT_GE(at, signalled + drain_ms) << "answered before the drain timeout";
    EXPECT_LT(at, signalled + drain_ms + after_drain_ms) << "answered late";
  }

  expect_retry_advice(chat_answer);
  auto chat_error = chat_answer.json().at("error");
  EXPECT_EQ(str(chat_error.at("code")), "shutting_down");
  EXPECT_EQ(str(chat_error.at("type")), "overloaded_error");
  EXPECT_EQ(str(chat_error.at("request_id")), "chat");

  expect_retry_advice(messages_answer);
  auto body = messages_answer.json().as_object();
  EXPECT_EQ(str(body.at("type")), "error");
  EXPECT_EQ(str(body.at("error").at("type")), "overloaded_error") << messages_answer.body;
  EXPECT_NE(str(body.at("error").at("message")).find("shutting down"), std::string::npos)
      << messages_answer.body;
  EXPECT_EQ(str(body.at("request_id")), "messages");

  // The upstream saw both connections closed by the gateway at the drain timeout.
  auto stats = mock.wait_for_stats([](const auto& s) { return s.at("active").as_int64() == 0; });
  for (const char* id : {"chat", "messages"}) {
    auto es = entries_of(stats, id);
    ASSERT_EQ(es.size(), 1u) << id;
    EXPECT_EQ(str(es[0].at("outcome")), "closed_by_client") << id;
    EXPECT_GE(num(es[0].at("closed_ms")), signalled + drain_ms) << id;
    EXPECT_LT(num(es[0].at("closed_ms")), signalled + drain_ms + after_drain_ms) << id;
    auto line = access_line(gw, id, 2s);
    ASSERT_TRUE(line) << id;
    EXPECT_EQ(str(line->at("outcome")), "shutting_down") << id;
    EXPECT_EQ(line->at("status").as_int64(), 503) << id;
  }
  EXPECT_EQ(gw.process().wait_exit(5s), std::optional<int>(0));
  EXPECT_EQ(drained_slots_left(gw, 1s), std::optional<long>(0));
}

}  // namespace
}  // namespace tether::test
