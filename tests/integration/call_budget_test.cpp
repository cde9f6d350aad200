// One call, one budget across the client's tries (docs/contract.md, "One call, one budget"):
// a client's retry of a call that did not end ok — same key or peer, surface, model, session and
// body but for `stream` — gets only what is left of the first try's deadline, and nothing left
// is a 504 at once with no upstream attempt; an ok ends the call; without a session (or an
// Idempotency-Key) identical bodies are separate calls, unless the model says call_identity =
// "body"; a call whose earlier tries spent its attempts at a failing upstream is answered their
// outcome at once. Against tether-mock over real sockets, timed by the test's own clock.
#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <thread>

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

// Codex CLI re-sends a call that an exhausted upstream failed, 30 times: the upstream must see
// the attempts of one budget (max_retries + 1), not one per re-send.
TEST_F(CallBudgetTest, ARetryOfACallWhoseAttemptsWereSpentIsAnsweredAtOnceWithNoUpstreamAttempt) {
  constexpr int window_ms = 1500;
  gw_ = std::make_unique<gateway_process>(gateway_config(
      mock_,
      "deadline_ms = 20000\nmax_retries = 2\nretry_backoff_ms = 10\ncall_window_ms = " +
          std::to_string(window_ms),
      model_entry("down", "mock-fail-503")));
  auto first = request("POST", gw_->port(), "/v1/chat/completions", body_of("down"),
                       headers("spent-0"), 10s);
  ASSERT_EQ(first.status, 502) << first.body;
  const auto code = str(first.json().at("error").at("code"));
  EXPECT_EQ(entries_of(mock_.stats(), "spent-0").size(), 3u) << "the first try's whole budget";
  constexpr int retries = 5;
  for (int i = 1; i <= retries; ++i) {
    const auto id = "spent-" + std::to_string(i);
    auto retry = request("POST", gw_->port(), "/v1/chat/completions", body_of("down", i % 2 == 0),
                         headers(id), 10s);
    EXPECT_EQ(retry.status, first.status) << retry.body;
    EXPECT_EQ(str(retry.json().at("error").at("code")), code);
    EXPECT_NE(str(retry.json().at("error").at("message")).find("spent by its earlier tries"),
              std::string::npos)
        << retry.body;
    ASSERT_TRUE(retry.header("x-should-retry"));
    EXPECT_EQ(*retry.header("x-should-retry"), "false");
    EXPECT_LT(retry.elapsed.count(), slack_ms) << "answered at once";
    EXPECT_EQ(entries_of(mock_.stats(), id).size(), 0u) << id << " reached the upstream";
    auto line = access_line(*gw_, id);
    ASSERT_TRUE(line) << id;
    EXPECT_EQ(line->at("call_try").as_int64(), i + 1);
    EXPECT_EQ(str(line->at("outcome")), "upstream_failed");
    EXPECT_TRUE(line->at("attempts").as_array().empty());
  }
  EXPECT_EQ(num(mock_.stats().at("requests")), 3) << "one budget for the whole call";
  EXPECT_EQ(metric(gw_->port(), "tether_call_retries_total{result=\"out_of_attempts\"}"), retries);
  EXPECT_EQ(metric(gw_->port(), "tether_call_retries_total{result=\"served\"}"), 0);

  // After the window (from the last try's end, before its answer left) the same request is a
  // new call with a budget of its own. Waiting out the window is what is tested: no event ends it.
  std::this_thread::sleep_for(std::chrono::milliseconds(window_ms + 200));
  auto later = request("POST", gw_->port(), "/v1/chat/completions", body_of("down"),
                       headers("spent-later"), 10s);
  EXPECT_EQ(later.status, 502) << later.body;
  EXPECT_EQ(entries_of(mock_.stats(), "spent-later").size(), 3u) << "a fresh budget";
  auto line = access_line(*gw_, "spent-later");
  ASSERT_TRUE(line);
  EXPECT_EQ(line->at("call_try").as_int64(), 1);
}

// An upstream's 429 without Retry-After is advised retryable to a caller without a deadline of
// its own; once the call's attempts are spent, its retry is told not to.
TEST_F(CallBudgetTest, ASpentCallsRateLimitIsAnsweredAtOnceAndNotAdvisedRetryable) {
  gw_ = std::make_unique<gateway_process>(
      gateway_config(mock_, "deadline_ms = 20000\nmax_retries = 2\nretry_backoff_ms = 10",
                     model_entry("busy", "mock-fail-429")));
  auto first =
      request("POST", gw_->port(), "/v1/chat/completions", body_of("busy"), headers("busy-1"), 10s);
  ASSERT_EQ(first.status, 429) << first.body;
  ASSERT_TRUE(first.header("x-should-retry"));
  EXPECT_EQ(*first.header("x-should-retry"), "true");
  EXPECT_EQ(entries_of(mock_.stats(), "busy-1").size(), 3u);
  auto retry =
      request("POST", gw_->port(), "/v1/chat/completions", body_of("busy"), headers("busy-2"), 10s);
  EXPECT_EQ(retry.status, 429) << retry.body;
  EXPECT_EQ(str(retry.json().at("error").at("code")), str(first.json().at("error").at("code")));
  ASSERT_TRUE(retry.header("x-should-retry"));
  EXPECT_EQ(*retry.header("x-should-retry"), "false") << "a second budget advised";
  EXPECT_EQ(entries_of(mock_.stats(), "busy-2").size(), 0u);
}

// A try that spent part of the call's attempts before its client left: the retry makes only the
// attempts left (3 in all, max_retries = 2).
TEST_F(CallBudgetTest, ARetryMakesOnlyTheAttemptsItsEarlierTriesLeft) {
  gw_ = std::make_unique<gateway_process>(
      gateway_config(mock_, "deadline_ms = 20000\nmax_retries = 2\nretry_backoff_ms = 2000",
                     model_entry("down", "mock-fail-503")));
  // The client leaves during a backoff: one attempt spent, or two when the first backoff's full
  // jitter drew under 200 ms (all three spent would need both under it together: 1 in 400).
  stream_options leave;
  leave.close_after = 200ms;
  stream_request("POST", gw_->port(), "/v1/chat/completions", body_of("down"), headers("part-1"),
                 leave);
  auto first = access_line(*gw_, "part-1", 10s);
  ASSERT_TRUE(first);
  ASSERT_EQ(str(first->at("outcome")), "client_disconnected");
  const auto spent = entries_of(mock_.stats(), "part-1").size();
  ASSERT_GE(spent, 1u);
  ASSERT_LT(spent, 3u) << "the client did not leave before the budget was spent";
  auto retry =
      request("POST", gw_->port(), "/v1/chat/completions", body_of("down"), headers("part-2"), 10s);
  EXPECT_EQ(retry.status, 502) << retry.body;
  EXPECT_EQ(entries_of(mock_.stats(), "part-2").size(), 3u - spent)
      << "the retry makes the attempts left, not a budget of its own";
  auto next =
      request("POST", gw_->port(), "/v1/chat/completions", body_of("down"), headers("part-3"), 10s);
  EXPECT_EQ(next.status, 502);
  EXPECT_EQ(entries_of(mock_.stats(), "part-3").size(), 0u);
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
