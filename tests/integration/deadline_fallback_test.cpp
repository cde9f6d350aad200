// One deadline for the whole request, across its fallback chain (promise 1): a fallback model
// whose own deadline_ms is larger does not extend it, on every surface. And the attempt timeout
// of a stream whose upstream sent its head and then nothing (promise 2): the head does not commit
// the response, so the attempt is retried and the caller gets an ordinary status, never a 200
// stream that breaks.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

// From the deadline (or an attempt timeout) to the caller's answer or the upstream's close:
// the timer's way through the io thread and the actors on a loaded 2-core machine.
constexpr double answer_slack_ms = TETHER_SANITIZED ? 1000.0 : 300.0;

std::string body_for(const std::string& path, const std::string& model, bool stream) {
  const std::string s = stream ? "true" : "false";
  if (path == "/v1/embeddings") return R"({"model":")" + model + R"(","input":"hello"})";
  if (path == "/v1/completions")
    return R"({"model":")" + model + R"(","prompt":"hello","stream":)" + s + "}";
  if (path == "/v1/responses")
    return R"({"model":")" + model + R"(","input":"hello","stream":)" + s + "}";
  if (path == "/v1/messages" || path == "/v1/messages/count_tokens")
    return R"({"model":")" + model +
           R"(","max_tokens":16,"messages":[{"role":"user","content":"hello"}],"stream":)" + s +
           "}";
  return chat_body(model, stream);
}

// The outcome a gateway error names, checked where each surface says it: the header always, and
// the body's `code` on the OpenAI surfaces (an Anthropic body has the error's type instead).
void expect_error_outcome(const http_response& r, const std::string& path,
                          const std::string& outcome, const std::string& anthropic_type) {
  ASSERT_NE(r.header("x-tether-outcome"), nullptr);
  EXPECT_EQ(*r.header("x-tether-outcome"), outcome);
  if (path.rfind("/v1/messages", 0) == 0) {
    EXPECT_EQ(str(r.json().at("type")), "error") << r.body;
    EXPECT_EQ(str(r.json().at("error").at("type")), anthropic_type) << r.body;
  } else {
    EXPECT_EQ(str(r.json().at("error").at("code")), outcome) << r.body;
  }
}

std::string short_name(const std::string& path) {
  if (path == "/v1/embeddings") return "embeddings";
  if (path == "/v1/completions") return "completions";
  if (path == "/v1/responses") return "responses";
  if (path == "/v1/messages") return "messages";
  if (path == "/v1/messages/count_tokens") return "count_tokens";
  return "chat";
}

// ---- the deadline across fallbacks -----------------------------------------------------------

struct deadline_case {
  const char* path;
  bool from_header;  // the caller's X-Request-Deadline-Ms, else the configured deadline_ms
};

void PrintTo(const deadline_case& c, std::ostream* os) {
  *os << c.path << (c.from_header ? " caller's deadline" : " configured deadline");
}

class DeadlineAcrossFallbacks : public ::testing::TestWithParam<deadline_case> {};

TEST_P(DeadlineAcrossFallbacks, TheRequestsDeadlineWinsOverAFallbacksLongerOne) {
  const auto c = GetParam();
  constexpr double deadline_ms = 1000;
  mock_server mock;
  const std::string configured = c.from_header ? "60000" : "1000";
  // The first model fails slowly (its attempt times out); the second hangs with a deadline of
  // its own a minute long; the third would answer at once if it were ever reached.
  gateway_process gw{gateway_config(
      mock, "deadline_ms = " + configured + "\nattempt_timeout_ms = 60000\nmax_retries = 0",
      model_entry("first", "mock-hang", "attempt_timeout_ms = 300\nfallbacks = [\"second\"]") +
          model_entry("second", "mock-delay-30000",
                      "deadline_ms = 60000\nattempt_timeout_ms = 60000\nfallbacks = [\"third\"]") +
          model_entry("third", "mock"))};
  header_map headers{{"x-request-id", "chain"}};
  if (c.from_header) headers.push_back({"x-request-deadline-ms", "1000"});
  auto r = request("POST", gw.port(), c.path, body_for(c.path, "first", false), headers, 8s);
  const double answered = epoch_ms_now();
  ASSERT_EQ(r.status, 504) << r.body;
  expect_error_outcome(r, c.path, "deadline_exceeded", "timeout_error");
  EXPECT_GE(r.elapsed.count(), deadline_ms);
  EXPECT_LT(r.elapsed.count(), deadline_ms + answer_slack_ms);

  auto stats = mock.wait_for_stats([](const auto& s) {
    for (const auto& e : mock_log(s))
      if (str(e.at("outcome")) == "in_progress") return false;
    return !mock_log(s).empty();
  });
  auto log = mock_log(stats);
  ASSERT_EQ(log.size(), 2u) << "the chain went first → second, and never to third";
  EXPECT_EQ(str(log[0].at("model")), "mock-hang");
  EXPECT_EQ(str(log[1].at("model")), "mock-delay-30000");
  for (const auto& e : log) {
    ASSERT_EQ(str(e.at("outcome")), "closed_by_client");
    EXPECT_LE(num(e.at("closed_ms")), answered + answer_slack_ms)
        << "an upstream connection outlived the deadline";
  }
  auto line = access_line(gw, "chain");
  ASSERT_TRUE(line);
  EXPECT_EQ(str(line->at("outcome")), "deadline_exceeded");
  EXPECT_DOUBLE_EQ(num(line->at("deadline_ms")), deadline_ms);
  EXPECT_EQ(line->at("attempts").as_array().size(), 2u);
  EXPECT_TRUE(await_metric(gw.port(), "tether_upstream_work_in_flight{upstream=\"mock\"}", 0, 5s));
}

INSTANTIATE_TEST_SUITE_P(
    EverySurface, DeadlineAcrossFallbacks,
    ::testing::Values(deadline_case{"/v1/chat/completions", false},
                      deadline_case{"/v1/chat/completions", true},
                      deadline_case{"/v1/completions", false},
                      deadline_case{"/v1/completions", true},
                      deadline_case{"/v1/embeddings", false}, deadline_case{"/v1/embeddings", true},
                      deadline_case{"/v1/responses", false}, deadline_case{"/v1/responses", true},
                      deadline_case{"/v1/messages", false}, deadline_case{"/v1/messages", true},
                      deadline_case{"/v1/messages/count_tokens", false},
                      deadline_case{"/v1/messages/count_tokens", true}),
    [](const ::testing::TestParamInfo<deadline_case>& info) {
      return short_name(info.param.path) +
             (info.param.from_header ? "_caller_deadline" : "_configured_deadline");
    });

// ---- the attempt timeout of a stream that sent its head and nothing more ----------------------

struct drip_case {
  const char* path;
  bool fallback;  // a fallback model that answers, else every try times out
};

void PrintTo(const drip_case& c, std::ostream* os) {
  *os << c.path << (c.fallback ? " then a fallback" : " every try");
}

class StreamingAttemptTimeout : public ::testing::TestWithParam<drip_case> {};

TEST_P(StreamingAttemptTimeout, AHeadWithoutABodyIsRetriedAndTheCallerGetsAnOrdinaryStatus) {
  const auto c = GetParam();
  constexpr double attempt_ms = 400;
  constexpr int max_retries = 2;
  mock_server mock;
  gateway_process gw{gateway_config(
      mock,
      "deadline_ms = 30000\nattempt_timeout_ms = 400\nstream_idle_timeout_ms = 60000\n"
      "max_retries = 2\nretry_backoff_ms = 1",
      model_entry("drip", "mock-drip-60000",
                  c.fallback ? "fallbacks = [\"fast\"]" : std::string()) +
          model_entry("fast", "mock"))};
  auto r = request("POST", gw.port(), c.path, body_for(c.path, "drip", true),
                   {{"x-request-id", "dripper"}}, 8s);
  if (c.fallback) {
    // The fallback's stream, whole: nothing of the timed-out attempts reached the caller.
    ASSERT_EQ(r.status, 200) << r.body;
    ASSERT_NE(r.header("content-type"), nullptr);
    EXPECT_EQ(r.header("content-type")->rfind("text/event-stream", 0), 0u);
    // A stream's end: [DONE] on chat and completions, response.completed on Responses,
    // message_stop on Messages.
    const std::string path = c.path;
    const bool named = path == "/v1/responses" || path == "/v1/messages";
    EXPECT_NE(r.body.find(path == "/v1/responses"  ? "event: response.completed"
                          : path == "/v1/messages" ? "event: message_stop"
                                                   : "data: [DONE]"),
              std::string::npos)
        << r.body;
    // No error event (a Responses object carries "error":null of its own).
    EXPECT_EQ(r.body.find(named ? "event: error" : "\"error\""), std::string::npos) << r.body;
  } else {
    ASSERT_EQ(r.status, 504) << r.body;
    expect_error_outcome(r, c.path, "upstream_timeout", "timeout_error");
  }
  EXPECT_GE(r.elapsed.count(), attempt_ms * (1 + max_retries));

  auto stats = mock.wait_for_stats([](const auto& s) {
    for (const auto& e : mock_log(s))
      if (str(e.at("outcome")) == "in_progress") return false;
    return !mock_log(s).empty();
  });
  std::vector<boost::json::object> drips;
  std::size_t fast = 0;
  for (const auto& e : mock_log(stats)) {
    if (str(e.at("model")) == "mock-drip-60000") drips.push_back(e);
    if (str(e.at("model")) == "mock") ++fast;
  }
  ASSERT_EQ(drips.size(), static_cast<std::size_t>(1 + max_retries));
  EXPECT_EQ(fast, c.fallback ? 1u : 0u);
  for (const auto& e : drips) {
    ASSERT_EQ(str(e.at("outcome")), "closed_by_client");
    // The mock's clock starts when the request reached it, a moment after the attempt began.
    const double lasted = num(e.at("closed_ms")) - num(e.at("started_ms"));
    std::printf("drip attempt closed after %.1f ms\n", lasted);
    EXPECT_GT(lasted, attempt_ms - 50);
    EXPECT_LT(lasted, attempt_ms + answer_slack_ms);
  }
  auto line = access_line(gw, "dripper");
  ASSERT_TRUE(line);
  EXPECT_EQ(str(line->at("outcome")), c.fallback ? "ok" : "upstream_timeout");
  EXPECT_EQ(line->at("attempts").as_array().size(), 1 + max_retries + (c.fallback ? 1u : 0u));
}

INSTANTIATE_TEST_SUITE_P(
    StreamingSurfaces, StreamingAttemptTimeout,
    ::testing::Values(drip_case{"/v1/chat/completions", false},
                      drip_case{"/v1/chat/completions", true}, drip_case{"/v1/completions", false},
                      drip_case{"/v1/completions", true}, drip_case{"/v1/responses", false},
                      drip_case{"/v1/responses", true}, drip_case{"/v1/messages", false},
                      drip_case{"/v1/messages", true}),
    [](const ::testing::TestParamInfo<drip_case>& info) {
      return short_name(info.param.path) + (info.param.fallback ? "_then_fallback" : "_every_try");
    });

}  // namespace
}  // namespace tether::test
