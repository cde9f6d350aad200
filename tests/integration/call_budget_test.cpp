// One call, one deadline across the client's tries (docs/contract.md, "One call, one deadline"):
// a client's retry of a call that did not end ok — same key or peer, surface, model, session and
// body but for `stream` — gets only what is left of the first try's deadline, and nothing left
// is a 504 at once with no upstream attempt; an ok ends the call; without a session (or an
// Idempotency-Key) identical bodies are separate calls, unless the model says call_identity =
// "body". Against tether-mock over real sockets, timed by the test's own clock.
#include <gtest/gtest.h>

#include <iostream>
#include <string>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

// A fresh deadline is this long; a retry's is visibly shorter.
constexpr double deadline_ms = 3000;
// The test's send and the gateway's arrival of a request are this close, on an idle gateway on
// two shared cores; a retry answered "at once" comes well within this of its send.
constexpr double slack_ms = TETHER_SANITIZED ? 400 : 200;

const std::string session = "0b5c7c1e-2f4e-4a43-9c8b-1d2e3f4a5b6c";

std::string body_of(const std::string& model, bool stream = false) {
  return R"({"model":")" + model + R"(","stream":)" + (stream ? "true" : "false") +
         R"(,"messages":[{"role":"user","content":"what is one call?"}]})";
}

class CallBudgetTest : public ::testing::Test {
 protected:
  void start(const std::string& models) {
    gw_ = std::make_unique<gateway_process>(gateway_config(
        mock_, "deadline_ms = 3000\nattempt_timeout_ms = 60000\nmax_retries = 0", models));
  }

  header_map headers(const std::string& id, bool with_session = true) {
    header_map h{{"x-request-id", id}};
    if (with_session) h.emplace_back("x-claude-code-session-id", session);
    return h;
  }

  // A try the client gives up on after `after` (its own timeout), then its access line: written
  // once the gateway recorded the try's end, so the next try finds it.
  boost::json::object abandoned_try(const std::string& model, const std::string& id,
                                    std::chrono::milliseconds after, bool with_session = true) {
    stream_options leave;
    leave.close_after = after;
    stream_request("POST", gw_->port(), "/v1/chat/completions", body_of(model),
                   headers(id, with_session), leave);
    auto line = access_line(*gw_, id, 10s);
    EXPECT_TRUE(line) << id;
    if (!line) return {};
    EXPECT_EQ(str(line->at("outcome")), "client_disconnected");
    return *line;
  }

  mock_server mock_;
  std::unique_ptr<gateway_process> gw_;
};

// Codex CLI re-sends a call that ended with a 504: each re-send must cost nothing upstream.
TEST_F(CallBudgetTest, ARetryPastTheCallsDeadlineIsAnswered504AtOnceWithNoUpstreamAttempt) {
  start(model_entry("slow", "mock-hang"));
  auto first =
      request("POST", gw_->port(), "/v1/chat/completions", body_of("slow"), headers("try-1"), 10s);
  ASSERT_EQ(first.status, 504) << first.body;
  EXPECT_GE(first.elapsed.count(), deadline_ms - 1);
  // The client re-sends the same call at once, streaming this time.
  auto second = request("POST", gw_->port(), "/v1/chat/completions", body_of("slow", true),
                        headers("try-2"), 10s);
  EXPECT_EQ(second.status, 504) << second.body;
  EXPECT_LT(second.elapsed.count(), slack_ms) << "the retry waited for a deadline of its own";
  ASSERT_TRUE(second.header("x-tether-outcome"));
  EXPECT_EQ(*second.header("x-tether-outcome"), "deadline_exceeded");
  ASSERT_TRUE(second.header("x-should-retry"));
  EXPECT_EQ(*second.header("x-should-retry"), "false");
  EXPECT_EQ(str(second.json().at("error").at("code")), "deadline_exceeded");
  // And again: the upstream saw the first try only.
  auto third =
      request("POST", gw_->port(), "/v1/chat/completions", body_of("slow"), headers("try-3"), 10s);
  EXPECT_EQ(third.status, 504);
  EXPECT_LT(third.elapsed.count(), slack_ms);
  auto stats = mock_.stats();
  EXPECT_EQ(entries_of(stats, "try-1").size(), 1u);
  EXPECT_EQ(entries_of(stats, "try-2").size(), 0u)
      << "a retry with nothing left reached the upstream";
  EXPECT_EQ(entries_of(stats, "try-3").size(), 0u);
  EXPECT_EQ(num(stats.at("requests")), 1);

  auto line1 = access_line(*gw_, "try-1");
  auto line2 = access_line(*gw_, "try-2");
  auto line3 = access_line(*gw_, "try-3");
  ASSERT_TRUE(line1 && line2 && line3);
  EXPECT_EQ(line1->at("call_try").as_int64(), 1);
  EXPECT_EQ(line2->at("call_try").as_int64(), 2);
  EXPECT_EQ(line3->at("call_try").as_int64(), 3);
  EXPECT_EQ(str(line2->at("client_session")), session);
  EXPECT_EQ(str(line2->at("outcome")), "deadline_exceeded");
  EXPECT_EQ(line2->at("deadline_ms").as_double(), 0);
  EXPECT_TRUE(line2->at("attempts").as_array().empty());
  EXPECT_EQ(metric(gw_->port(), "tether_call_retries_total{result=\"out_of_budget\"}"), 2);
  EXPECT_EQ(metric(gw_->port(), "tether_call_retries_total{result=\"served\"}"), 0);
}

// A client that gave up after 1 s re-sends the call: the retry runs on the 2 s left.
TEST_F(CallBudgetTest, ARetryWithinTheWindowGetsOnlyTheRestOfTheDeadline) {
  start(model_entry("slow", "mock-hang"));
  const auto t0 = test_clock::now();
  auto first = abandoned_try("slow", "left-1", 1000ms);
  const auto t1 = test_clock::now();
  const double expected = deadline_ms - ms_double(t1 - t0).count();
  auto second =
      request("POST", gw_->port(), "/v1/chat/completions", body_of("slow"), headers("left-2"), 10s);
  EXPECT_EQ(second.status, 504) << second.body;
  // Answered when the first try's deadline passed, not a fresh 3 s after the retry came.
  EXPECT_GE(second.elapsed.count(), expected - slack_ms);
  EXPECT_LE(second.elapsed.count(), expected + slack_ms);
  auto line = access_line(*gw_, "left-2");
  ASSERT_TRUE(line);
  std::cout << "[calls] the retry was left " << line->at("deadline_ms").as_double()
            << " ms (expected " << expected << "), answered 504 after " << second.elapsed.count()
            << " ms\n";
  EXPECT_EQ(line->at("call_try").as_int64(), 2);
  EXPECT_NEAR(line->at("deadline_ms").as_double(), expected, slack_ms);
  EXPECT_EQ(first.at("call_try").as_int64(), 1);
  EXPECT_EQ(first.at("deadline_ms").as_double(), deadline_ms);
  // It had its attempt: time was left.
  EXPECT_EQ(entries_of(mock_.stats(), "left-2").size(), 1u);
  EXPECT_EQ(metric(gw_->port(), "tether_call_retries_total{result=\"served\"}"), 1);
}

// A batch job sends the same body on purpose: without a session each is a call of its own.
TEST_F(CallBudgetTest, IdenticalBodiesWithoutASessionAreSeparateCalls) {
  start(model_entry("slow", "mock-hang"));
  abandoned_try("slow", "batch-1", 300ms, false);
  auto second = request("POST", gw_->port(), "/v1/chat/completions", body_of("slow"),
                        headers("batch-2", false), 10s);
  EXPECT_EQ(second.status, 504);
  EXPECT_GE(second.elapsed.count(), deadline_ms - 1) << "a full deadline of its own";
  auto line = access_line(*gw_, "batch-2");
  ASSERT_TRUE(line);
  EXPECT_TRUE(line->at("call_try").is_null());
  EXPECT_TRUE(line->at("client_session").is_null());
  EXPECT_EQ(line->at("deadline_ms").as_double(), deadline_ms);
}

// call_identity = "body" on a model: a client that sends no session (LangChain, the AI SDK) has
// its retries told by the body alone.
TEST_F(CallBudgetTest, CallIdentityBodyTellsRetriesWithoutASession) {
  start(model_entry("slow", "mock-hang", "call_identity = \"body\""));
  auto first = request("POST", gw_->port(), "/v1/chat/completions", body_of("slow"),
                       headers("body-1", false), 10s);
  ASSERT_EQ(first.status, 504);
  auto second = request("POST", gw_->port(), "/v1/chat/completions", body_of("slow"),
                        headers("body-2", false), 10s);
  EXPECT_EQ(second.status, 504);
  EXPECT_LT(second.elapsed.count(), slack_ms);
  EXPECT_EQ(entries_of(mock_.stats(), "body-2").size(), 0u);
}

// Success ends the call: the same body again is a new call with a deadline of its own.
TEST_F(CallBudgetTest, AnOkEndsTheCallTheSameBodyAgainIsAFreshCall) {
  start(model_entry("quick", "mock-delay-600"));
  abandoned_try("quick", "ok-1", 200ms);
  auto retry =
      request("POST", gw_->port(), "/v1/chat/completions", body_of("quick"), headers("ok-2"), 10s);
  ASSERT_EQ(retry.status, 200) << retry.body;
  auto retry_line = access_line(*gw_, "ok-2");
  ASSERT_TRUE(retry_line);
  EXPECT_EQ(retry_line->at("call_try").as_int64(), 2);
  EXPECT_LT(retry_line->at("deadline_ms").as_double(), deadline_ms - 150);
  auto again =
      request("POST", gw_->port(), "/v1/chat/completions", body_of("quick"), headers("ok-3"), 10s);
  ASSERT_EQ(again.status, 200) << again.body;
  auto line = access_line(*gw_, "ok-3");
  ASSERT_TRUE(line);
  EXPECT_EQ(line->at("call_try").as_int64(), 1);
  EXPECT_EQ(line->at("deadline_ms").as_double(), deadline_ms);
}

// An Idempotency-Key ties tries whose bodies differ.
TEST_F(CallBudgetTest, AnIdempotencyKeyTiesTriesWhoseBodiesDiffer) {
  start(model_entry("slow", "mock-hang"));
  auto first = request("POST", gw_->port(), "/v1/chat/completions", body_of("slow"),
                       {{"x-request-id", "idem-1"}, {"idempotency-key", "op-42"}}, 10s);
  ASSERT_EQ(first.status, 504);
  auto second = request("POST", gw_->port(), "/v1/chat/completions",
                        R"({"model":"slow","messages":[{"role":"user","content":"rephrased"}]})",
                        {{"x-request-id", "idem-2"}, {"idempotency-key", "op-42"}}, 10s);
  EXPECT_EQ(second.status, 504);
  EXPECT_LT(second.elapsed.count(), slack_ms);
  EXPECT_EQ(entries_of(mock_.stats(), "idem-2").size(), 0u);
}

// The table is bounded: a flood of distinct failing calls evicts the oldest, counted.
TEST_F(CallBudgetTest, AFloodOfDistinctFailingCallsIsBoundedAndItsEvictionsCounted) {
  gw_ = std::make_unique<gateway_process>(
      gateway_config(mock_, "deadline_ms = 3000\nmax_retries = 0\ncall_table_max = 2",
                     model_entry("bad", "mock-fail-400")));
  for (int i = 0; i < 5; ++i) {
    auto r = request(
        "POST", gw_->port(), "/v1/chat/completions",
        R"({"model":"bad","messages":[{"role":"user","content":"q)" + std::to_string(i) + R"("}]})",
        headers("flood-" + std::to_string(i)), 10s);
    ASSERT_EQ(r.status, 400);
  }
  EXPECT_EQ(metric(gw_->port(), "tether_call_table_evictions_total"), 3);
}

}  // namespace
}  // namespace tether::test
