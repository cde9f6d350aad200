// Hostile upstreams (issue #8): tether-mock breaks HTTP or SSE in one way per model name. Each
// maps to its outcome, nothing crashes, the budget slot is released (the work gauge is back to 0
// once the request's access line, written after its last upstream socket closed, is out), and
// the gateway then serves a normal request.
#include <gtest/gtest.h>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

const std::string chat_path = "/v1/chat/completions";

double work_in_flight(std::uint16_t port) {
  return metric(port, "tether_upstream_work_in_flight{upstream=\"mock\"}");
}

class HostileUpstreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string models = model_entry("chat", "mock");
    for (const char* mode : {"badstatus", "garbage", "truncated", "sse-cut", "badchunk", "reset",
                             "huge-8", "drip-1"}) {
      models += model_entry(mode, std::string("mock-") + mode);
    }
    models += model_entry("drip-slow", "mock-drip-20", "attempt_timeout_ms = 400\nmax_retries = 0");
    gw_ = std::make_unique<gateway_process>(gateway_config(
        mock_,
        "deadline_ms = 15000\nattempt_timeout_ms = 5000\nmax_retries = 2\nretry_backoff_ms = 10\n"
        "stream_idle_timeout_ms = 3000\nmax_response_bytes = 1048576",
        models));
  }

  http_response post(const std::string& model, const std::string& request_id) {
    return request("POST", gw_->port(), chat_path, chat_body(model), {{"x-request-id", request_id}},
                   15s);
  }

  stream_result post_stream(const std::string& model, const std::string& request_id) {
    stream_options options;
    options.timeout = 15s;
    return stream_request("POST", gw_->port(), chat_path, chat_body(model, true),
                          {{"x-request-id", request_id}}, options);
  }

  // The request's access line, with its outcome; then the slot is back.
  boost::json::object expect_ended(const std::string& request_id, const std::string& outcome) {
    auto line = access_line(*gw_, request_id, 10s);
    EXPECT_TRUE(line) << "no access line for " << request_id;
    if (!line) return {};
    EXPECT_EQ(str(line->at("outcome")), outcome) << request_id;
    // The budget learns of the connection's end from its own down message, which may trail the
    // access line by a moment: bounded polling, as no event announces it to the test.
    double in_flight = work_in_flight(gw_->port());
    for (int i = 0; i < 100 && in_flight != 0; ++i) {
      std::this_thread::sleep_for(10ms);
      in_flight = work_in_flight(gw_->port());
    }
    EXPECT_EQ(in_flight, 0) << "budget slot not released after " << request_id;
    return *line;
  }

  void expect_still_serves() {
    auto r = request("POST", gw_->port(), chat_path, chat_body("chat"));
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_TRUE(gw_->process().running());
  }

  std::int64_t mock_requests() { return mock_.stats().at("requests").as_int64(); }

  // A stream that broke after relaying whole events: those events, then one error event.
  void expect_interrupted_stream(const stream_result& r, std::size_t whole_events) {
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.end, stream_end::complete) << "the gateway ends the stream properly";
    auto data = r.sse_data();
    ASSERT_EQ(data.size(), whole_events + 1) << r.body;
    for (std::size_t i = 0; i < whole_events; ++i) {
      EXPECT_EQ(str(boost::json::parse(data[i]).at("object")), "chat.completion.chunk");
    }
    auto error = boost::json::parse(data.back()).at("error");
    EXPECT_EQ(str(error.at("code")), "stream_interrupted");
    EXPECT_NE(str(error.at("message")).find("upstream"), std::string::npos) << data.back();
  }

  mock_server mock_;
  std::unique_ptr<gateway_process> gw_;
};

TEST_F(HostileUpstreamTest, MalformedStatusLineIsRetriedThen502UpstreamFailed) {
  auto r = post("badstatus", "badstatus-1");
  ASSERT_EQ(r.status, 502) << r.body;
  EXPECT_EQ(str(r.json().at("error").at("code")), "upstream_failed");
  EXPECT_NE(str(r.json().at("error").at("message")).find("malformed"), std::string::npos) << r.body;
  auto line = expect_ended("badstatus-1", "upstream_failed");
  EXPECT_EQ(line.at("attempts").as_array().size(), 3u);
  EXPECT_EQ(mock_requests(), 3);
  expect_still_serves();
}

// The gateway relays response bodies without parsing them (as it relays request bodies): a 200
// whose body is not JSON is the upstream's answer, passed on byte for byte, not a failure.
TEST_F(HostileUpstreamTest, GarbageBodyWithStatus200IsRelayedUnchanged) {
  auto r = post("garbage", "garbage-1");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "<html>this is not JSON</html>\n{\"choices\": [{\"message\"");
  expect_ended("garbage-1", "ok");
  EXPECT_EQ(mock_requests(), 1);
  expect_still_serves();
}

TEST_F(HostileUpstreamTest, TruncatedBodyIsRetriedThen502UpstreamFailed) {
  auto r = post("truncated", "truncated-1");
  ASSERT_EQ(r.status, 502) << r.body;
  EXPECT_EQ(str(r.json().at("error").at("code")), "upstream_failed");
  // Nothing of the partial body reaches the caller.
  EXPECT_EQ(r.body.find("mock response"), std::string::npos);
  auto line = expect_ended("truncated-1", "upstream_failed");
  EXPECT_EQ(line.at("attempts").as_array().size(), 3u);
  EXPECT_EQ(mock_requests(), 3);
  expect_still_serves();
}

TEST_F(HostileUpstreamTest, SseStreamStoppingMidEventEndsWithStreamInterruptedAndNoHalfEvent) {
  auto r = post_stream("sse-cut", "sse-cut-1");
  expect_interrupted_stream(r, 3);
  EXPECT_EQ(r.body.find("cut-mid-event"), std::string::npos) << "half an event was relayed";
  expect_ended("sse-cut-1", "stream_interrupted");
  EXPECT_EQ(mock_requests(), 1) << "a committed stream is never retried";
  expect_still_serves();
}

TEST_F(HostileUpstreamTest, AResponsesStreamThatBreaksEndsWithTheResponsesApisErrorEvent) {
  for (const std::string mode : {"sse-cut", "reset"}) {
    const std::string id = "responses-" + mode;
    stream_options options;
    options.timeout = 15s;
    auto r = stream_request("POST", gw_->port(), "/v1/responses",
                            R"({"model":")" + mode + R"(","input":"hi","stream":true})",
                            {{"x-request-id", id}}, options);
    ASSERT_EQ(r.status, 200) << mode;
    EXPECT_EQ(r.end, stream_end::complete) << mode;
    // The mock's three pieces (four opening events, three deltas), whole, and then its break
    // before the answer's end: the gateway relays the whole events and ends with its own error
    // event and the Responses API's response.failed.
    auto events = r.sse_events();
    ASSERT_EQ(events.size(), 9u) << r.body;
    for (std::size_t i = 0; i < 7; ++i) EXPECT_EQ(events[i].name.rfind("response.", 0), 0u);
    EXPECT_EQ(events[6].name, "response.output_text.delta");
    EXPECT_EQ(events[7].name, "error");
    auto error = boost::json::parse(events[7].data);
    EXPECT_EQ(str(error.at("type")), "error");
    EXPECT_EQ(str(error.at("code")), "stream_interrupted");
    EXPECT_NE(str(error.at("message")).find("upstream"), std::string::npos) << events[7].data;
    EXPECT_EQ(events.back().name, "response.failed");
    auto failed = boost::json::parse(events.back().data);
    EXPECT_EQ(str(failed.at("response").at("status")), "failed") << events.back().data;
    EXPECT_EQ(str(failed.at("response").at("error").at("code")), "stream_interrupted");
    EXPECT_EQ(r.body.find("cut-mid-event"), std::string::npos) << "half an event was relayed";
    expect_ended(id, "stream_interrupted");
  }
  EXPECT_EQ(mock_requests(), 2) << "a committed stream is never retried";
  expect_still_serves();
}

TEST_F(HostileUpstreamTest, AMessagesStreamThatBreaksEndsWithTheMessagesApisErrorEvent) {
  for (const std::string mode : {"sse-cut", "reset"}) {
    const std::string id = "messages-" + mode;
    stream_options options;
    options.timeout = 15s;
    auto r = stream_request(
        "POST", gw_->port(), "/v1/messages",
        R"({"model":")" + mode +
            R"(","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"stream":true})",
        {{"x-request-id", id}}, options);
    ASSERT_EQ(r.status, 200) << mode;
    EXPECT_EQ(r.end, stream_end::complete) << mode;
    // The mock's three pieces (three opening events, three deltas), whole, and then its break
    // before the answer's end: the gateway relays the whole events and ends with its own error
    // event.
    auto events = r.sse_events();
    ASSERT_EQ(events.size(), 7u) << r.body;
    EXPECT_EQ(events.front().name, "message_start");
    EXPECT_EQ(events[3].name, "content_block_delta");
    EXPECT_EQ(events[5].name, "content_block_delta");
    EXPECT_EQ(events.back().name, "error");
    auto error = boost::json::parse(events.back().data);
    EXPECT_EQ(str(error.at("type")), "error");
    EXPECT_EQ(str(error.at("error").at("type")), "api_error");
    EXPECT_NE(str(error.at("error").at("message")).find("upstream"), std::string::npos)
        << events.back().data;
    EXPECT_EQ(r.body.find("cut-mid-event"), std::string::npos) << "half an event was relayed";
    expect_ended(id, "stream_interrupted");
  }
  EXPECT_EQ(mock_requests(), 2) << "a committed stream is never retried";
  expect_still_serves();
}

TEST_F(HostileUpstreamTest, InvalidChunkMidStreamEndsWithStreamInterrupted) {
  auto r = post_stream("badchunk", "badchunk-1");
  expect_interrupted_stream(r, 3);
  EXPECT_EQ(r.body.find("garbage"), std::string::npos);
  expect_ended("badchunk-1", "stream_interrupted");
  EXPECT_EQ(mock_requests(), 1);
  expect_still_serves();
}

TEST_F(HostileUpstreamTest, BodyFarOverMaxResponseBytesIs502AndTheUpstreamIsCutOff) {
  // 8 MiB against a 1 MiB limit: refused without buffering it all, and not retried (it would be
  // just as large again).
  auto r = post("huge-8", "huge-1");
  ASSERT_EQ(r.status, 502) << r.body.substr(0, 200);
  EXPECT_EQ(str(r.json().at("error").at("code")), "upstream_failed");
  EXPECT_NE(str(r.json().at("error").at("message")).find("max_response_bytes"), std::string::npos);
  expect_ended("huge-1", "upstream_failed");
  auto stats =
      mock_.wait_for_stats([](const auto& s) { return s.at("closed_by_client").as_int64() == 1; });
  EXPECT_EQ(stats.at("requests").as_int64(), 1);
  EXPECT_EQ(stats.at("closed_by_client").as_int64(), 1) << "the gateway read the whole body";
  expect_still_serves();
}

// The same on the Anthropic surface, answered in its shape.
TEST_F(HostileUpstreamTest, AHugeMessagesBodyIs502InAnthropicsShapeAndTheUpstreamIsCutOff) {
  auto r =
      request("POST", gw_->port(), "/v1/messages",
              R"({"model":"huge-8","max_tokens":16,"messages":[{"role":"user","content":"x"}]})",
              {{"x-request-id", "huge-messages"}}, 15s);
  ASSERT_EQ(r.status, 502) << r.body.substr(0, 200);
  EXPECT_EQ(str(r.json().at("type")), "error");
  EXPECT_EQ(str(r.json().at("error").at("type")), "api_error");
  EXPECT_NE(str(r.json().at("error").at("message")).find("max_response_bytes"), std::string::npos);
  expect_ended("huge-messages", "upstream_failed");
  auto stats =
      mock_.wait_for_stats([](const auto& s) { return s.at("closed_by_client").as_int64() == 1; });
  EXPECT_EQ(stats.at("requests").as_int64(), 1);
  EXPECT_EQ(stats.at("closed_by_client").as_int64(), 1) << "the gateway read the whole body";
  expect_still_serves();
}

TEST_F(HostileUpstreamTest, ResetMidStreamEndsWithStreamInterrupted) {
  auto r = post_stream("reset", "reset-1");
  expect_interrupted_stream(r, 3);
  expect_ended("reset-1", "stream_interrupted");
  EXPECT_EQ(mock_requests(), 1);
  expect_still_serves();
}

TEST_F(HostileUpstreamTest, ResetBeforeANonStreamingAnswerIsRetriedThen502) {
  auto r = post("reset", "reset-2");
  ASSERT_EQ(r.status, 502) << r.body;
  EXPECT_EQ(str(r.json().at("error").at("code")), "upstream_failed");
  expect_ended("reset-2", "upstream_failed");
  EXPECT_EQ(mock_requests(), 3);
  expect_still_serves();
}

TEST_F(HostileUpstreamTest, SlowDripWithinTheAttemptTimeoutArrivesWhole) {
  auto r = post("drip-1", "drip-1");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(str(r.json().at("object")), "chat.completion");
  expect_ended("drip-1", "ok");

  auto s = post_stream("drip-1", "drip-2");
  ASSERT_EQ(s.status, 200);
  ASSERT_EQ(s.end, stream_end::complete);
  auto data = s.sse_data();
  ASSERT_EQ(data.size(), 2u) << s.body;  // one event, reassembled from single bytes, and [DONE]
  EXPECT_EQ(str(boost::json::parse(data[0]).at("object")), "chat.completion.chunk");
  EXPECT_EQ(data[1], "[DONE]");
  expect_ended("drip-2", "ok");
  expect_still_serves();
}

TEST_F(HostileUpstreamTest, SlowDripPastTheAttemptTimeoutIs504AndTheUpstreamIsCutOff) {
  auto r = post("drip-slow", "drip-slow-1");
  ASSERT_EQ(r.status, 504) << r.body;
  EXPECT_EQ(str(r.json().at("error").at("code")), "upstream_timeout");
  EXPECT_GE(r.elapsed.count(), 390.0);
  EXPECT_LT(r.elapsed.count(), 400.0 + 600.0);
  expect_ended("drip-slow-1", "upstream_timeout");
  auto stats =
      mock_.wait_for_stats([](const auto& s) { return s.at("closed_by_client").as_int64() == 1; });
  EXPECT_EQ(stats.at("closed_by_client").as_int64(), 1);
  expect_still_serves();
}

}  // namespace
}  // namespace tether::test
