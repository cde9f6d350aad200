// What a model response tells the caller about its own outcome (issue 25): x-tether-outcome on
// every model response, x-should-retry (and retry-after-ms with a Retry-After) on every non-2xx,
// so that an SDK's own retries do not start a second budget for the same call; and a mid-stream
// error event whose `type` names its cause.
#include <gtest/gtest.h>

#include <thread>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

const std::string chat_path = "/v1/chat/completions";

std::string tiny_models() {
  // An upstream with one slot and no queue: a second request while the slot is held is
  // refused with 503 overloaded.
  return "[[upstreams]]\nname = \"tiny\"\nbase_url = \"{MOCK}\"\nmax_in_flight = 1\n\n"
         "[[models]]\nname = \"tiny-slow\"\nupstream = \"tiny\"\nupstream_model = "
         "\"mock-delay-1500\"\n\n[[models]]\nname = \"tiny\"\nupstream = \"tiny\"\n"
         "upstream_model = \"mock\"\n\n[budget]\nqueue_max = 0\n";
}

class ResponseHeadersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string models =
        model_entry("chat", "mock") + model_entry("rejecting", "mock-fail-400") +
        model_entry("failing", "mock-fail-503", "max_retries = 0") +
        model_entry("hanging", "mock-hang") +
        model_entry("timing-out", "mock-hang", "attempt_timeout_ms = 200\nmax_retries = 0") +
        model_entry("limited", "mock-ratelimit-1", "max_retries = 0") +
        model_entry("stream", "mock-stream-3x10");
    auto extra = tiny_models();
    extra.replace(extra.find("{MOCK}"), 6, mock_.url());
    gw_ = std::make_unique<gateway_process>(gateway_config(
        mock_, "deadline_ms = 15000\nattempt_timeout_ms = 5000\nretry_backoff_ms = 10\n", models,
        extra));
  }

  http_response post(const std::string& model, const header_map& headers = {},
                     std::string body = {}) {
    if (body.empty()) body = chat_body(model);
    return request("POST", gw_->port(), chat_path, body, headers, 15s);
  }

  static std::string header(const http_response& r, std::string_view name) {
    const auto* v = r.header(name);
    return v ? *v : "<absent>";
  }

  mock_server mock_;
  std::unique_ptr<gateway_process> gw_;
};

TEST_F(ResponseHeadersTest, ASuccessNamesItsOutcomeAndSaysNothingAboutRetrying) {
  auto r = post("chat");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(header(r, "x-tether-outcome"), "ok");
  EXPECT_EQ(r.header("x-should-retry"), nullptr);
  EXPECT_EQ(r.header("retry-after-ms"), nullptr);
}

TEST_F(ResponseHeadersTest, AStreamsHeadNamesItsOutcome) {
  stream_options o;
  o.timeout = 10s;
  auto r = stream_request("POST", gw_->port(), chat_path, chat_body("stream", true), {}, o);
  EXPECT_EQ(r.status, 200);
  ASSERT_NE(r.header("x-tether-outcome"), nullptr);
  EXPECT_EQ(*r.header("x-tether-outcome"), "ok");
  EXPECT_EQ(r.header("x-should-retry"), nullptr);
}

TEST_F(ResponseHeadersTest, APassedThroughRejectionIsNotWorthARetry) {
  auto r = post("rejecting");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(header(r, "x-tether-outcome"), "upstream_rejected");
  EXPECT_EQ(header(r, "x-should-retry"), "false");
}

TEST_F(ResponseHeadersTest, AnExhaustedUpstreamIsNotWorthARetry) {
  auto r = post("failing");
  EXPECT_EQ(r.status, 502);
  EXPECT_EQ(header(r, "x-tether-outcome"), "upstream_failed");
  EXPECT_EQ(header(r, "x-should-retry"), "false");
}

TEST_F(ResponseHeadersTest, AnUpstreamTimeoutIsNotWorthARetry) {
  auto r = post("timing-out");
  EXPECT_EQ(r.status, 504);
  EXPECT_EQ(header(r, "x-tether-outcome"), "upstream_timeout");
  EXPECT_EQ(header(r, "x-should-retry"), "false");
}

TEST_F(ResponseHeadersTest, ThePassedDeadlineIsNotWorthARetry) {
  // Written by the caller's io thread at the deadline, not by the request actor.
  auto r = post("hanging", {{"x-request-deadline-ms", "200"}});
  EXPECT_EQ(r.status, 504);
  EXPECT_EQ(header(r, "x-tether-outcome"), "deadline_exceeded");
  EXPECT_EQ(header(r, "x-should-retry"), "false");
  // A spent budget is answered by the request actor before any attempt.
  auto spent = post("hanging", {{"x-request-deadline-ms", "0"}});
  EXPECT_EQ(spent.status, 504);
  EXPECT_EQ(header(spent, "x-tether-outcome"), "deadline_exceeded");
  EXPECT_EQ(header(spent, "x-should-retry"), "false");
}

TEST_F(ResponseHeadersTest, ARateLimitIsWorthARetryWhenItsWaitFitsTheCallersDeadline) {
  // No deadline of the caller's own: the wait the upstream asks is the caller's to take.
  auto open = post("limited");
  EXPECT_EQ(open.status, 429);
  EXPECT_EQ(header(open, "x-tether-outcome"), "upstream_rate_limited");
  EXPECT_EQ(header(open, "retry-after"), "1");
  EXPECT_EQ(header(open, "retry-after-ms"), "1000");
  EXPECT_EQ(header(open, "x-should-retry"), "true");
  // One second fits into five.
  auto fits = post("limited", {{"x-request-deadline-ms", "5000"}});
  EXPECT_EQ(fits.status, 429);
  EXPECT_EQ(header(fits, "retry-after-ms"), "1000");
  EXPECT_EQ(header(fits, "x-should-retry"), "true");
  // It does not fit into half a second: tether answers at once, and advises against a retry.
  auto too_long = post("limited", {{"x-request-deadline-ms", "500"}});
  EXPECT_EQ(too_long.status, 429);
  EXPECT_EQ(header(too_long, "x-tether-outcome"), "upstream_rate_limited");
  EXPECT_EQ(header(too_long, "retry-after-ms"), "1000");
  EXPECT_EQ(header(too_long, "x-should-retry"), "false");
}

TEST_F(ResponseHeadersTest, AnOverloadedGatewayAsksForARetryAfterItsWait) {
  std::thread holder([&] { post("tiny-slow"); });
  // The slot is held once the upstream has the request.
  auto seen = mock_.wait_for_stats(
      [](const boost::json::object& s) { return s.at("log").as_array().size() >= 1; }, 10s);
  ASSERT_GE(seen.at("log").as_array().size(), 1u);
  auto r = post("tiny");
  holder.join();
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(header(r, "x-tether-outcome"), "overloaded");
  EXPECT_EQ(header(r, "retry-after"), "1");
  EXPECT_EQ(header(r, "retry-after-ms"), "1000");
  EXPECT_EQ(header(r, "x-should-retry"), "true");
}

TEST_F(ResponseHeadersTest, RefusalsBeforeAnyUpstreamNameTheirOutcome) {
  auto unknown = post("no-such-model");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(header(unknown, "x-tether-outcome"), "unknown_model");
  EXPECT_EQ(header(unknown, "x-should-retry"), "false");
  auto malformed = post("chat", {}, "{not json");
  EXPECT_EQ(malformed.status, 400);
  EXPECT_EQ(header(malformed, "x-tether-outcome"), "bad_request");
  EXPECT_EQ(header(malformed, "x-should-retry"), "false");
}

// ---- mid-stream error events ----------------------------------------------------------------

class StreamErrorTypeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gw_ = std::make_unique<gateway_process>(gateway_config(
        mock_,
        "deadline_ms = 15000\nattempt_timeout_ms = 5000\nmax_retries = 0\n"
        "stream_idle_timeout_ms = 300\n",
        model_entry("long", "mock-stream-50x100") + model_entry("gappy", "mock-stream-3x1000") +
            model_entry("cut", "mock-sse-cut") + model_entry("reset", "mock-reset")));
  }

  // The `error` object of the stream's last event, after at least one relayed event.
  boost::json::object last_error(const std::string& model, const header_map& headers = {}) {
    stream_options o;
    o.timeout = 15s;
    auto r = stream_request("POST", gw_->port(), chat_path, chat_body(model, true), headers, o);
    EXPECT_EQ(r.status, 200) << model;
    auto events = r.sse_data();
    EXPECT_GE(events.size(), 2u) << model << ": " << r.body;
    if (events.size() < 2) return {};
    auto v = boost::json::parse(events.back());
    EXPECT_TRUE(v.is_object() && v.as_object().contains("error")) << events.back();
    if (!v.is_object() || !v.as_object().contains("error")) return {};
    return v.as_object().at("error").as_object();
  }

  mock_server mock_;
  std::unique_ptr<gateway_process> gw_;
};

TEST_F(StreamErrorTypeTest, TheDeadlineMidStreamIsATimeoutError) {
  auto e = last_error("long", {{"x-request-deadline-ms", "500"}});
  EXPECT_EQ(str(e.at("code")), "stream_interrupted");
  EXPECT_EQ(str(e.at("type")), "timeout_error");
}

TEST_F(StreamErrorTypeTest, TheIdleTimeoutMidStreamIsATimeoutError) {
  auto e = last_error("gappy");
  EXPECT_EQ(str(e.at("code")), "stream_interrupted");
  EXPECT_EQ(str(e.at("type")), "timeout_error");
}

TEST_F(StreamErrorTypeTest, AnUpstreamThatBreaksMidStreamIsAnUpstreamError) {
  for (const char* model : {"cut", "reset"}) {
    auto e = last_error(model);
    EXPECT_EQ(str(e.at("code")), "stream_interrupted") << model;
    EXPECT_EQ(str(e.at("type")), "upstream_error") << model;
  }
}

}  // namespace
}  // namespace tether::test
