// The Anthropic surfaces end to end (issue #28): /v1/messages and /v1/messages/count_tokens
// through an `api = "anthropic"` upstream (tether-mock speaks the Messages API), the key as the
// Anthropic SDK sends it, the version headers passed on, and the gateway's own errors in
// Anthropic's shape.
#include <gtest/gtest.h>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

const std::string caller_token = "tok-messages-caller-42";

std::string messages_body(const std::string& model, bool stream = false) {
  return R"({"model":")" + model + R"(","max_tokens":64,"stream":)" + (stream ? "true" : "false") +
         R"(,"messages":[{"role":"user","content":"a secret prompt"}]})";
}

class MessagesTest : public ::testing::Test {
 protected:
  // Two upstreams on the one mock: "mock" (the harness's, an OpenAI-API server serving every
  // surface) and "claude-api" (api = "anthropic", with a key), plus a model only on an
  // OpenAI-API upstream that serves the OpenAI surfaces alone.
  void SetUp() override {
    const std::string anthropic_upstream =
        "[[upstreams]]\nname = \"claude-api\"\nbase_url = \"" + mock_.url() +
        "\"\napi = \"anthropic\"\napi_key_env = \"TETHER_TEST_ANTHROPIC_KEY\"\n\n"
        "[[upstreams]]\nname = \"openai-only\"\nbase_url = \"" +
        mock_.url() + "\"\n\n";
    const std::string on_claude = "upstream = \"claude-api\"\n";
    std::string models =
        "[[models]]\nname = \"claude\"\n" + on_claude + "upstream_model = \"mock\"\n\n" +
        "[[models]]\nname = \"claude-stream\"\n" + on_claude +
        "upstream_model = \"mock-stream-4x50\"\n\n" + "[[models]]\nname = \"claude-hang\"\n" +
        on_claude + "upstream_model = \"mock-hang\"\n\n" + "[[models]]\nname = \"claude-fail\"\n" +
        on_claude + "upstream_model = \"mock-fail-500\"\n\n" +
        "[[models]]\nname = \"gpt\"\nupstream = \"openai-only\"\nupstream_model = \"mock\"\n\n";
    const std::string keys = "[[keys]]\nname = \"caller\"\nsha256 = \"" + sha256_hex(caller_token) +
                             "\"\nmodels = [\"*\"]\n\n";
    auto cfg =
        gateway_config(mock_, "deadline_ms = 10000\nattempt_timeout_ms = 5000\nmax_retries = 1",
                       models, anthropic_upstream + keys);
    gw_ = std::make_unique<gateway_process>(
        cfg, env_list{{"TETHER_TEST_ANTHROPIC_KEY", "sk-ant-upstream-77"}});
  }

  header_map as_anthropic_sdk(const std::string& request_id) const {
    return {{"x-api-key", caller_token},
            {"anthropic-version", "2023-06-01"},
            {"x-request-id", request_id}};
  }

  // An Anthropic-shaped gateway error: type "error", error.type by status, the outcome in the
  // header, the request id in the body.
  static void expect_anthropic_error(const http_response& r, int status, const std::string& type,
                                     const std::string& outcome) {
    ASSERT_EQ(r.status, status) << r.body;
    auto body = r.json().as_object();
    EXPECT_EQ(str(body.at("type")), "error") << r.body;
    EXPECT_EQ(str(body.at("error").at("type")), type) << r.body;
    EXPECT_FALSE(str(body.at("error").at("message")).empty());
    EXPECT_FALSE(body.contains("code")) << "the outcome is not in an Anthropic body";
    ASSERT_NE(r.header("x-tether-outcome"), nullptr);
    EXPECT_EQ(*r.header("x-tether-outcome"), outcome);
    ASSERT_NE(r.header("x-request-id"), nullptr);
    EXPECT_EQ(str(body.at("request_id")), *r.header("x-request-id"));
    EXPECT_EQ(r.body.find("secret prompt"), std::string::npos) << "the prompt is never echoed";
  }

  mock_server mock_;
  std::unique_ptr<gateway_process> gw_;
};

TEST_F(MessagesTest, AMessageIsAnsweredWithTheUpstreamKeyAsXApiKeyAndTheVersionPassedOn) {
  auto r = request("POST", gw_->port(), "/v1/messages", messages_body("claude"),
                   {{"x-api-key", caller_token},
                    {"anthropic-version", "2024-10-22"},
                    {"anthropic-beta", "prompt-caching-2024-07-31"},
                    {"x-request-id", "msg-1"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(str(r.json().at("type")), "message");
  EXPECT_EQ(str(r.json().at("role")), "assistant");
  EXPECT_EQ(*r.header("x-tether-outcome"), "ok");
  auto seen = entries_of(mock_.stats(), "msg-1");
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(str(seen[0].at("path")), "/v1/messages");
  EXPECT_EQ(str(seen[0].at("model")), "mock");
  const auto& h = seen[0].at("headers").as_object();
  EXPECT_EQ(str(h.at("x-api-key")), "sk-ant-upstream-77") << "the upstream's key, not the caller's";
  EXPECT_FALSE(h.contains("authorization"));
  EXPECT_EQ(str(h.at("anthropic-version")), "2024-10-22");
  EXPECT_EQ(str(h.at("anthropic-beta")), "prompt-caching-2024-07-31");

  // No version from the caller: the upstream still gets one.
  auto bare = request("POST", gw_->port(), "/v1/messages", messages_body("claude"),
                      {{"authorization", "Bearer " + caller_token}, {"x-request-id", "msg-2"}});
  ASSERT_EQ(bare.status, 200) << bare.body;
  seen = entries_of(mock_.stats(), "msg-2");
  ASSERT_EQ(seen.size(), 1u);
  const auto& h2 = seen[0].at("headers").as_object();
  EXPECT_EQ(str(h2.at("anthropic-version")), "2023-06-01");
  EXPECT_FALSE(h2.contains("anthropic-beta"));
  EXPECT_EQ(str(h2.at("x-api-key")), "sk-ant-upstream-77");

  auto out = gw_->process().output();
  EXPECT_EQ(out.find("sk-ant-upstream-77"), std::string::npos);
  EXPECT_EQ(out.find(caller_token), std::string::npos);
  EXPECT_EQ(out.find("secret prompt"), std::string::npos);
}

TEST_F(MessagesTest, AStreamIsRelayedEventByEventWithTheMessagesApisNames) {
  stream_options opts;
  opts.timeout = 5s;
  auto s = stream_request("POST", gw_->port(), "/v1/messages", messages_body("claude-stream", true),
                          as_anthropic_sdk("msg-stream"), opts);
  ASSERT_EQ(s.status, 200);
  ASSERT_EQ(s.end, stream_end::complete);
  auto events = s.sse_events();
  // Three opening events, four deltas fifty milliseconds apart, three closing ones.
  ASSERT_EQ(events.size(), 10u) << s.body;
  EXPECT_EQ(events[0].name, "message_start");
  EXPECT_EQ(events[1].name, "content_block_start");
  EXPECT_EQ(events[2].name, "ping");
  for (std::size_t i = 3; i < 7; ++i) EXPECT_EQ(events[i].name, "content_block_delta") << i;
  EXPECT_EQ(events[7].name, "content_block_stop");
  EXPECT_EQ(events[8].name, "message_delta");
  EXPECT_EQ(events[9].name, "message_stop");
  EXPECT_EQ(s.body.find("[DONE]"), std::string::npos) << "the gateway adds nothing of its own";
  auto times = s.sse_event_times();
  ASSERT_EQ(times.size(), 10u);
  auto spread = std::chrono::duration<double, std::milli>(times[6] - times[3]).count();
  EXPECT_GT(spread, 100.0) << "the deltas were held back and sent together";
  auto line = access_line(*gw_, "msg-stream");
  ASSERT_TRUE(line);
  EXPECT_EQ(str(line->at("outcome")), "ok");
  EXPECT_EQ(str(line->at("path")), "/v1/messages");
}

TEST_F(MessagesTest, CountTokensAnswersWholeEvenWhenAStreamIsAskedFor) {
  auto r = request("POST", gw_->port(), "/v1/messages/count_tokens", messages_body("claude", true),
                   as_anthropic_sdk("count-1"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_GT(r.json().at("input_tokens").as_int64(), 0);
  auto seen = entries_of(mock_.stats(), "count-1");
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(str(seen[0].at("path")), "/v1/messages/count_tokens");
  EXPECT_FALSE(seen[0].at("headers").as_object().contains("accept") &&
               str(seen[0].at("headers").at("accept")) == "text/event-stream");
}

TEST_F(MessagesTest, TheGatewaysOwnErrorsOnMessagesAreAnthropicShaped) {
  // No key, a wrong key.
  expect_anthropic_error(request("POST", gw_->port(), "/v1/messages", messages_body("claude"),
                                 {{"anthropic-version", "2023-06-01"}}),
                         401, "authentication_error", "unauthorized");
  expect_anthropic_error(request("POST", gw_->port(), "/v1/messages", messages_body("claude"),
                                 {{"x-api-key", caller_token + "x"}}),
                         401, "authentication_error", "unauthorized");
  // Unknown model; malformed body; wrong method.
  expect_anthropic_error(
      request("POST", gw_->port(), "/v1/messages", messages_body("nope"), as_anthropic_sdk("e-1")),
      404, "not_found_error", "unknown_model");
  expect_anthropic_error(
      request("POST", gw_->port(), "/v1/messages/count_tokens",
              "{\"model\": \"claude\", \"messages\": [", as_anthropic_sdk("e-2")),
      400, "invalid_request_error", "bad_request");
  auto get = request("GET", gw_->port(), "/v1/messages", "", as_anthropic_sdk("e-3"));
  expect_anthropic_error(get, 405, "invalid_request_error", "bad_request");
  // The upstream fails on every attempt: 502; the deadline passes: 504.
  expect_anthropic_error(request("POST", gw_->port(), "/v1/messages", messages_body("claude-fail"),
                                 as_anthropic_sdk("e-4")),
                         502, "api_error", "upstream_failed");
  auto sdk = as_anthropic_sdk("e-5");
  sdk.emplace_back("x-request-deadline-ms", "300");
  const auto sent = std::chrono::steady_clock::now();
  auto late = request("POST", gw_->port(), "/v1/messages", messages_body("claude-hang"), sdk);
  expect_anthropic_error(late, 504, "timeout_error", "deadline_exceeded");
  EXPECT_LT(std::chrono::steady_clock::now() - sent, 2s);
  ASSERT_NE(late.header("x-should-retry"), nullptr);
  EXPECT_EQ(*late.header("x-should-retry"), "false");
}

// A surface none of a model's deployments serves is a 404 naming the surface, in the shape of
// the surface asked for; nothing reaches an upstream.
TEST_F(MessagesTest, AModelAskedForOnASurfaceItsDeploymentsDoNotServeIs404NamingIt) {
  auto on_messages =
      request("POST", gw_->port(), "/v1/messages", messages_body("gpt"), as_anthropic_sdk("s-1"));
  expect_anthropic_error(on_messages, 404, "not_found_error", "unknown_model");
  EXPECT_NE(on_messages.body.find("/v1/messages"), std::string::npos) << on_messages.body;

  auto on_chat = request("POST", gw_->port(), "/v1/chat/completions", chat_body("claude"),
                         {{"authorization", "Bearer " + caller_token}});
  ASSERT_EQ(on_chat.status, 404) << on_chat.body;
  EXPECT_EQ(str(on_chat.json().at("error").at("code")), "unknown_model");
  EXPECT_NE(on_chat.body.find("/v1/chat/completions"), std::string::npos) << on_chat.body;
  EXPECT_EQ(mock_.stats().at("requests").as_int64(), 0);
}

}  // namespace
}  // namespace tether::test
