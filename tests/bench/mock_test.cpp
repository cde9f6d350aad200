// tether-mock through the test support library: what tests of the gateway will rely on, the
// OpenAI shapes, the timing of streams and, above all, what the upstream observed.
#include <signal.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "tests/support/http_client.hpp"
#include "tests/support/mock_server.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

namespace tether::test {
namespace {

namespace json = boost::json;
using namespace std::chrono_literals;

std::string chat_body(std::string_view model, bool stream = false) {
  json::object body{
      {"model", model},
      {"messages", json::array{json::object{{"role", "user"}, {"content", "a secret prompt"}}}}};
  if (stream) body["stream"] = true;
  return json::serialize(body);
}

double ms_between(test_clock::time_point a, test_clock::time_point b) {
  return ms_double(b - a).count();
}

// The test's steady clock expressed as the mock's epoch milliseconds.
double epoch_ms(test_clock::time_point t) {
  auto now_steady = test_clock::now();
  auto now_system = std::chrono::system_clock::now();
  auto epoch_now = std::chrono::duration<double, std::milli>(now_system.time_since_epoch());
  return epoch_now.count() - ms_between(t, now_steady);
}

std::int64_t count(const json::object& stats, std::string_view key) {
  return stats.at(key).to_number<std::int64_t>();
}

class MockTest : public ::testing::Test {
 protected:
  http_response post(std::string_view path, const std::string& body) {
    return request("POST", mock_.port(), path, body);
  }

  mock_server mock_;
};

TEST_F(MockTest, ChatCompletionWithoutStreamIsShapedLikeOpenAI) {
  auto response = post("/v1/chat/completions", chat_body("mock"));

  ASSERT_EQ(response.status, 200);
  ASSERT_NE(response.header("content-type"), nullptr);
  EXPECT_EQ(*response.header("content-type"), "application/json");
  auto body = response.json().as_object();
  EXPECT_EQ(body.at("object"), "chat.completion");
  EXPECT_EQ(body.at("model"), "mock");
  EXPECT_TRUE(body.at("id").is_string());
  EXPECT_TRUE(body.at("created").is_int64());
  const auto& choice = body.at("choices").as_array().at(0).as_object();
  EXPECT_EQ(choice.at("index"), 0);
  EXPECT_EQ(choice.at("finish_reason"), "stop");
  EXPECT_EQ(choice.at("message").at("role"), "assistant");
  std::string content(choice.at("message").at("content").as_string());
  EXPECT_EQ(content.find("secret"), std::string::npos) << "the mock never echoes a prompt";
  auto id = log_entry(mock_.stats(), 0).at("id").to_number<std::int64_t>();
  EXPECT_NE(content.find("#" + std::to_string(id)), std::string::npos) << content;
  const auto& usage = body.at("usage").as_object();
  EXPECT_EQ(count(usage, "total_tokens"),
            count(usage, "prompt_tokens") + count(usage, "completion_tokens"));
}

TEST_F(MockTest, StreamOfFiveByFiftySendsFiveEventsFiftyMsApartThenDone) {
  stream_options options;
  options.timeout = 5s;
  auto result = stream_request("POST", mock_.port(), "/v1/chat/completions",
                               chat_body("mock-stream-5x50", true), {}, options);

  ASSERT_EQ(result.end, stream_end::complete);
  EXPECT_EQ(result.status, 200);
  ASSERT_NE(result.header("content-type"), nullptr);
  EXPECT_EQ(*result.header("content-type"), "text/event-stream");
  ASSERT_NE(result.header("transfer-encoding"), nullptr);
  EXPECT_EQ(*result.header("transfer-encoding"), "chunked");

  auto events = result.sse_data();
  ASSERT_EQ(events.size(), 6u);
  EXPECT_EQ(events.back(), "[DONE]");
  for (std::size_t i = 0; i < 5; ++i) {
    auto chunk = json::parse(events[i]).as_object();
    EXPECT_EQ(chunk.at("object"), "chat.completion.chunk");
    EXPECT_EQ(chunk.at("model"), "mock-stream-5x50");
    const auto& choice = chunk.at("choices").as_array().at(0).as_object();
    EXPECT_TRUE(choice.at("delta").at("content").is_string());
    EXPECT_EQ(choice.at("finish_reason").is_null(), i < 4) << "event " << i;
  }
  EXPECT_EQ(json::parse(events[0]).at("choices").at(0).at("delta").at("role"), "assistant");

  auto times = result.sse_event_times();
  ASSERT_EQ(times.size(), 6u);
  EXPECT_GE(ms_between(result.sent_at, times[0]), 40.0);
  EXPECT_LE(ms_between(result.sent_at, times[0]), 150.0);
  for (std::size_t i = 1; i < 5; ++i) {
    auto gap = ms_between(times[i - 1], times[i]);
    EXPECT_GE(gap, 25.0) << "gap before event " << i;
    EXPECT_LE(gap, 120.0) << "gap before event " << i;
  }
  EXPECT_LE(ms_between(times[4], times[5]), 25.0) << "[DONE] follows the last event at once";
}

TEST_F(MockTest, CompletionsStreamSendsTextCompletionEvents) {
  stream_options options;
  options.timeout = 5s;
  auto result =
      stream_request("POST", mock_.port(), "/v1/completions",
                     R"({"model":"mock-stream-2x10","prompt":"hi","stream":true})", {}, options);

  ASSERT_EQ(result.end, stream_end::complete);
  auto events = result.sse_data();
  ASSERT_EQ(events.size(), 3u);
  auto first = json::parse(events[0]).as_object();
  EXPECT_EQ(first.at("object"), "text_completion");
  EXPECT_TRUE(first.at("choices").at(0).at("text").is_string());
  EXPECT_EQ(events[2], "[DONE]");
}

TEST_F(MockTest, ResponsesWithoutStreamAnswerACompletedResponseObject) {
  auto response =
      post("/v1/responses", R"({"model":"mock","input":"a secret prompt","max_output_tokens":9})");

  ASSERT_EQ(response.status, 200);
  auto body = response.json().as_object();
  EXPECT_EQ(body.at("object"), "response");
  EXPECT_EQ(body.at("status"), "completed");
  EXPECT_EQ(body.at("model"), "mock");
  EXPECT_EQ(std::string(body.at("id").as_string()).rfind("resp_", 0), 0u);
  const auto& message = body.at("output").as_array().at(0).as_object();
  EXPECT_EQ(message.at("type"), "message");
  EXPECT_EQ(message.at("role"), "assistant");
  const auto& part = message.at("content").as_array().at(0).as_object();
  EXPECT_EQ(part.at("type"), "output_text");
  std::string text(part.at("text").as_string());
  EXPECT_EQ(text.find("secret"), std::string::npos) << "the mock never echoes a prompt";
  const auto& usage = body.at("usage").as_object();
  EXPECT_EQ(count(usage, "total_tokens"),
            count(usage, "input_tokens") + count(usage, "output_tokens"));
}

TEST_F(MockTest, ResponsesStreamSendsTheResponsesEventsWithTheirNamesAndNoDone) {
  stream_options options;
  options.timeout = 5s;
  auto result =
      stream_request("POST", mock_.port(), "/v1/responses",
                     R"({"model":"mock-stream-3x20","input":"hi","stream":true})", {}, options);

  ASSERT_EQ(result.end, stream_end::complete);
  EXPECT_EQ(*result.header("content-type"), "text/event-stream");
  auto events = result.sse_events();
  std::vector<std::string> names;
  for (const auto& e : events) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "response.created", "response.in_progress", "response.output_item.added",
                       "response.content_part.added", "response.output_text.delta",
                       "response.output_text.delta", "response.output_text.delta",
                       "response.output_text.done", "response.content_part.done",
                       "response.output_item.done", "response.completed"}));
  std::string deltas;
  for (std::size_t i = 0; i < events.size(); ++i) {
    auto data = json::parse(events[i].data).as_object();
    EXPECT_EQ(std::string(data.at("type").as_string()), events[i].name) << "event " << i;
    EXPECT_EQ(count(data, "sequence_number"), static_cast<std::int64_t>(i));
    if (events[i].name == "response.output_text.delta") deltas += data.at("delta").as_string();
  }
  auto done = json::parse(events[7].data).as_object();
  EXPECT_EQ(std::string(done.at("text").as_string()), deltas);
  auto completed = json::parse(events.back().data).at("response").as_object();
  EXPECT_EQ(completed.at("status"), "completed");
  EXPECT_EQ(count(completed.at("usage").as_object(), "output_tokens"), 3);
  // The three pieces are the simulated work: one per interval, counted as chunks sent.
  EXPECT_EQ(count(log_entry(mock_.stats(), 0), "chunks_sent"), 3);
}

std::string messages_body(std::string_view model, bool stream = false) {
  json::object body{
      {"model", model},
      {"max_tokens", 16},
      {"messages", json::array{json::object{{"role", "user"}, {"content", "a secret prompt"}}}}};
  if (stream) body["stream"] = true;
  return json::serialize(body);
}

std::string str(const json::value& v) {
  return std::string(v.as_string());
}

// The mock's token count: a quarter of the request body's bytes, plus one.
std::int64_t mock_tokens(const std::string& body) {
  return static_cast<std::int64_t>(body.size() / 4 + 1);
}

TEST_F(MockTest, MessagesWithoutStreamAnswerAnAnthropicMessage) {
  const auto sent = messages_body("mock");
  auto response = request("POST", mock_.port(), "/v1/messages", sent,
                          {{"x-api-key", "sk-ant-test"}, {"anthropic-version", "2023-06-01"}});

  ASSERT_EQ(response.status, 200);
  EXPECT_EQ(*response.header("content-type"), "application/json");
  auto body = response.json().as_object();
  auto entry = log_entry(mock_.stats(), 0);
  const auto id = entry.at("id").to_number<std::int64_t>();
  std::vector<std::string> keys;
  for (const auto& field : body) keys.emplace_back(field.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"id", "type", "role", "content", "model", "stop_reason",
                                            "stop_sequence", "usage"}));
  EXPECT_EQ(str(body.at("id")), "msg_mock_" + std::to_string(id));
  EXPECT_EQ(str(body.at("type")), "message");
  EXPECT_EQ(str(body.at("role")), "assistant");
  EXPECT_EQ(str(body.at("model")), "mock");
  EXPECT_EQ(str(body.at("stop_reason")), "end_turn");
  EXPECT_TRUE(body.at("stop_sequence").is_null());
  const auto& content = body.at("content").as_array();
  ASSERT_EQ(content.size(), 1u);
  EXPECT_EQ(str(content[0].at("type")), "text");
  auto text = str(content[0].at("text"));
  EXPECT_EQ(text.find("secret"), std::string::npos) << "the mock never echoes a prompt";
  EXPECT_NE(text.find("#" + std::to_string(id)), std::string::npos) << text;
  const auto& usage = body.at("usage").as_object();
  EXPECT_EQ(usage.size(), 2u);
  EXPECT_EQ(count(usage, "input_tokens"), mock_tokens(sent));
  EXPECT_EQ(count(usage, "output_tokens"), 5);
  // What the upstream saw: Anthropic's authentication and version headers.
  EXPECT_EQ(str(entry.at("path")), "/v1/messages");
  EXPECT_EQ(str(entry.at("model")), "mock");
  const auto& headers = entry.at("headers").as_object();
  EXPECT_EQ(str(headers.at("x-api-key")), "sk-ant-test");
  EXPECT_EQ(str(headers.at("anthropic-version")), "2023-06-01");
}

TEST_F(MockTest, MessagesHugeBodyPadsTheMessageText) {
  auto response = post("/v1/messages", messages_body("mock-huge-1"));

  ASSERT_EQ(response.status, 200);
  EXPECT_EQ(response.body.size(), 1024u * 1024u);
  auto body = response.json().as_object();
  EXPECT_EQ(str(body.at("type")), "message");
  EXPECT_EQ(str(body.at("content").at(0).at("text")).find("This is mock response #"), 0u);
}

TEST_F(MockTest, MessagesStreamSendsTheMessagesEventsInOrderAndNoDone) {
  stream_options options;
  options.timeout = 5s;
  const auto sent = messages_body("mock-stream-3x20", true);
  auto result = stream_request("POST", mock_.port(), "/v1/messages", sent, {}, options);

  ASSERT_EQ(result.end, stream_end::complete);
  EXPECT_EQ(*result.header("content-type"), "text/event-stream");
  auto events = result.sse_events();
  std::vector<std::string> names;
  for (const auto& e : events) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"message_start", "content_block_start", "ping",
                                             "content_block_delta", "content_block_delta",
                                             "content_block_delta", "content_block_stop",
                                             "message_delta", "message_stop"}));
  for (std::size_t i = 0; i < events.size(); ++i) {
    auto data = json::parse(events[i].data).as_object();
    EXPECT_EQ(str(data.at("type")), events[i].name) << "event " << i;
  }
  EXPECT_EQ(result.body.find("[DONE]"), std::string::npos);
  ASSERT_EQ(events.size(), 9u);

  auto message = json::parse(events[0].data).at("message").as_object();
  auto id = log_entry(mock_.stats(), 0).at("id").to_number<std::int64_t>();
  EXPECT_EQ(str(message.at("id")), "msg_mock_" + std::to_string(id));
  EXPECT_EQ(str(message.at("type")), "message");
  EXPECT_EQ(str(message.at("role")), "assistant");
  EXPECT_TRUE(message.at("content").as_array().empty());
  EXPECT_EQ(str(message.at("model")), "mock-stream-3x20");
  EXPECT_TRUE(message.at("stop_reason").is_null());
  EXPECT_TRUE(message.at("stop_sequence").is_null());
  EXPECT_EQ(count(message.at("usage").as_object(), "input_tokens"), mock_tokens(sent));
  EXPECT_EQ(count(message.at("usage").as_object(), "output_tokens"), 1);

  auto block = json::parse(events[1].data).as_object();
  EXPECT_EQ(count(block, "index"), 0);
  EXPECT_EQ(str(block.at("content_block").at("type")), "text");
  EXPECT_EQ(str(block.at("content_block").at("text")), "");
  for (std::size_t i = 3; i < 6; ++i) {
    auto delta = json::parse(events[i].data).as_object();
    EXPECT_EQ(count(delta, "index"), 0);
    EXPECT_EQ(str(delta.at("delta").at("type")), "text_delta");
    EXPECT_NE(str(delta.at("delta").at("text")).find("piece " + std::to_string(i - 2) + "/3"),
              std::string::npos);
  }
  EXPECT_EQ(count(json::parse(events[6].data).as_object(), "index"), 0);
  auto end = json::parse(events[7].data).as_object();
  EXPECT_EQ(str(end.at("delta").at("stop_reason")), "end_turn");
  EXPECT_TRUE(end.at("delta").at("stop_sequence").is_null());
  EXPECT_EQ(count(end.at("usage").as_object(), "output_tokens"), 3);
  // The three pieces are the simulated work: one per interval, counted as chunks sent.
  EXPECT_EQ(count(log_entry(mock_.stats(), 0), "chunks_sent"), 3);
}

TEST_F(MockTest, CountTokensAnswersInputTokensAndNeverStreams) {
  const auto sent = messages_body("mock", true);
  auto response = post("/v1/messages/count_tokens", sent);

  ASSERT_EQ(response.status, 200);
  EXPECT_EQ(*response.header("content-type"), "application/json");
  EXPECT_EQ(response.body, R"({"input_tokens":)" + std::to_string(mock_tokens(sent)) + "}");
  auto entry = log_entry(mock_.stats(), 0);
  EXPECT_EQ(str(entry.at("path")), "/v1/messages/count_tokens");
  EXPECT_EQ(entry.at("stream"), false);
}

TEST_F(MockTest, CountTokensHonoursTheDelayBehaviour) {
  auto response = post("/v1/messages/count_tokens", messages_body("mock-delay-200"));

  EXPECT_EQ(response.status, 200);
  EXPECT_GE(response.elapsed.count(), 195.0);
  EXPECT_TRUE(response.json().at("input_tokens").is_int64());
}

TEST_F(MockTest, MessagesFailuresAnswerAnthropicErrorBodies) {
  struct expected {
    std::string path;
    std::string model;
    int status;
    std::string type;
  };
  for (const auto& e : std::vector<expected>{
           {"/v1/messages", "mock-fail-400", 400, "invalid_request_error"},
           {"/v1/messages", "mock-fail-401", 401, "authentication_error"},
           {"/v1/messages", "mock-fail-403", 403, "permission_error"},
           {"/v1/messages", "mock-fail-413", 413, "request_too_large"},
           {"/v1/messages", "mock-fail-500", 500, "api_error"},
           {"/v1/messages", "mock-fail-502", 502, "api_error"},
           {"/v1/messages", "mock-fail-503", 503, "overloaded_error"},
           {"/v1/messages", "mock-fail-529", 529, "overloaded_error"},
           {"/v1/messages", "mock-flaky-100", 503, "overloaded_error"},
           {"/v1/messages", "claude-not-a-mock", 404, "not_found_error"},
           {"/v1/messages/count_tokens", "mock-fail-503", 503, "overloaded_error"},
           {"/v1/messages/nowhere", "mock", 404, "not_found_error"},
       }) {
    auto response = post(e.path, messages_body(e.model));
    EXPECT_EQ(response.status, e.status) << e.path << " " << e.model;
    auto body = response.json().as_object();
    EXPECT_EQ(body.size(), 2u) << response.body;
    EXPECT_EQ(str(body.at("type")), "error") << response.body;
    const auto& error = body.at("error").as_object();
    EXPECT_EQ(error.size(), 2u) << response.body;
    EXPECT_EQ(str(error.at("type")), e.type) << e.path << " " << e.model;
    EXPECT_FALSE(str(error.at("message")).empty());
  }
}

TEST_F(MockTest, MessagesRateLimitAnswers429WithRetryAfterAndAnthropicBody) {
  auto response = post("/v1/messages", messages_body("mock-ratelimit-2", true));

  EXPECT_EQ(response.status, 429);
  ASSERT_NE(response.header("retry-after"), nullptr);
  EXPECT_EQ(*response.header("retry-after"), "2");
  EXPECT_EQ(str(response.json().at("type")), "error");
  EXPECT_EQ(str(response.json().at("error").at("type")), "rate_limit_error");
  EXPECT_EQ(str(response.json().at("error").at("message")), "mock rate limit");
}

TEST_F(MockTest, MessagesStreamCutMidEventEndsInHalfAContentBlockDelta) {
  stream_options options;
  options.timeout = 5s;
  auto result = stream_request("POST", mock_.port(), "/v1/messages",
                               messages_body("mock-sse-cut", true), {}, options);

  EXPECT_EQ(result.status, 200);
  EXPECT_EQ(result.end, stream_end::server_closed);
  // Three opening events and three deltas of an answer that never ends: no message_stop.
  auto events = result.sse_events();
  ASSERT_EQ(events.size(), 6u) << result.body;
  EXPECT_EQ(events.front().name, "message_start");
  EXPECT_EQ(events.back().name, "content_block_delta");
  EXPECT_EQ(result.body.find("message_stop"), std::string::npos);
  for (const auto& e : events) EXPECT_NO_THROW(json::parse(e.data)) << e.name;
  // Whole events, then half of one in the Messages API's own shape, then the close.
  auto tail = result.body.substr(result.body.rfind("event: "));
  EXPECT_EQ(tail.rfind("event: content_block_delta\ndata: {\"type\":\"content_block_delta\"", 0),
            0u)
      << tail;
  EXPECT_NE(tail.find("cut-mid-event"), std::string::npos);
  EXPECT_EQ(result.body.find("[DONE]"), std::string::npos);
}

TEST_F(MockTest, ClientCloseDuringAMessagesHangIsRecorded) {
  stream_options options;
  options.close_after = 100ms;
  auto result = stream_request("POST", mock_.port(), "/v1/messages",
                               messages_body("mock-hang", true), {}, options);
  ASSERT_EQ(result.end, stream_end::stopped);
  EXPECT_EQ(result.status, 0) << "mock-hang never answers";

  auto stats =
      mock_.wait_for_stats([](const json::object& s) { return count(s, "closed_by_client") == 1; });
  auto entry = log_entry(stats, 0);
  EXPECT_EQ(str(entry.at("outcome")), "closed_by_client");
  EXPECT_EQ(str(entry.at("path")), "/v1/messages");
  EXPECT_EQ(entry.at("stream"), true);
  EXPECT_TRUE(entry.at("work_owed_ms").is_null()) << "a hang owes unbounded work";
}

TEST_F(MockTest, FailModelAnswersThatStatusWithOpenAIErrorBody) {
  auto response = post("/v1/chat/completions", chat_body("mock-fail-503"));

  EXPECT_EQ(response.status, 503);
  auto error = response.json().at("error").as_object();
  EXPECT_EQ(error.at("message"), "mock failure");
  EXPECT_EQ(error.at("type"), "mock_error");
  EXPECT_EQ(error.at("code"), "mock_fail_503");
}

TEST_F(MockTest, RateLimitModelAnswers429WithRetryAfter) {
  auto response = post("/v1/chat/completions", chat_body("mock-ratelimit-2"));

  EXPECT_EQ(response.status, 429);
  ASSERT_NE(response.header("retry-after"), nullptr);
  EXPECT_EQ(*response.header("retry-after"), "2");
  EXPECT_TRUE(response.json().at("error").at("message").is_string());
}

TEST_F(MockTest, UnknownModelAnswers404ModelNotFound) {
  auto response = post("/v1/chat/completions", chat_body("gpt-4o"));

  EXPECT_EQ(response.status, 404);
  EXPECT_EQ(response.json().at("error").at("code"), "model_not_found");
}

TEST_F(MockTest, FlakyFiftyAlternatesSuccessAndFailure) {
  std::vector<int> statuses;
  for (int i = 0; i < 6; ++i) {
    statuses.push_back(post("/v1/chat/completions", chat_body("mock-flaky-50")).status);
  }
  EXPECT_EQ(statuses, (std::vector<int>{200, 503, 200, 503, 200, 503}));
}

// A chat body naming one output limit (`limit_key`, or none when empty).
std::string kv_body(std::string_view model, std::string_view limit_key = {},
                    std::uint64_t limit = 0) {
  json::object body{
      {"model", model},
      {"messages", json::array{json::object{{"role", "user"}, {"content", "a secret prompt"}}}}};
  if (!limit_key.empty()) body[limit_key] = limit;
  return json::serialize(body);
}

// tether's token weight of a request (actors/policy/admission/token_weight.hpp), which the mock's
// KV demand must equal.
std::int64_t kv_demand(const std::string& body, std::int64_t max_output) {
  return static_cast<std::int64_t>(body.size() / 4) + max_output;
}

TEST_F(MockTest, KvModelAnswersAFittingRequestAfterItsDelayAndReleasesItsDemand) {
  const auto body = kv_body("mock-kv-1000-50", "max_tokens", 300);
  auto response = post("/v1/chat/completions", body);

  ASSERT_EQ(response.status, 200);
  EXPECT_GE(response.elapsed.count(), 45.0);
  EXPECT_EQ(response.json().at("object"), "chat.completion");
  EXPECT_TRUE(response.json().at("usage").is_object());
  auto stats = mock_.stats();
  EXPECT_EQ(count(stats, "kv_admitted"), 1);
  EXPECT_EQ(count(stats, "kv_over_budget"), 0);
  EXPECT_EQ(count(stats, "kv_peak_tokens"), kv_demand(body, 300));
  EXPECT_EQ(count(stats, "kv_tokens_in_flight"), 0);
}

TEST_F(MockTest, KvModelRefusesWhatDoesNotFitBesideTheWorkAndFreesItWhenTheClientLeaves) {
  // One budget of 1000 tokens, shared by every mock-kv-1000-* model: the holder works for a
  // minute, the others answer at once.
  const auto held = kv_body("mock-kv-1000-60000", "max_completion_tokens", 600);
  raw_connection holder(mock_.port());
  holder.send(
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
      "\r\nContent-Length: " +
      std::to_string(held.size()) + "\r\n\r\n" + held);
  auto stats = mock_.wait_for_stats([&](const json::object& s) {
    return count(s, "kv_tokens_in_flight") == kv_demand(held, 600);
  });
  ASSERT_EQ(count(stats, "kv_tokens_in_flight"), kv_demand(held, 600));

  const auto small = kv_body("mock-kv-1000-0", "max_tokens", 10);
  EXPECT_EQ(post("/v1/chat/completions", small).status, 200) << "it fits beside the holder";
  // The largest limit counts, as in tether's weight.
  json::object two_limits = json::parse(kv_body("mock-kv-1000-0", "max_tokens", 5)).as_object();
  two_limits["max_output_tokens"] = 600;
  const auto big = json::serialize(two_limits);
  auto refused = post("/v1/chat/completions", big);
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(refused.json().at("error").at("code"), "mock_kv_over_budget");
  EXPECT_EQ(refused.json().at("error").at("type"), "mock_error");

  holder.close();
  stats = mock_.wait_for_stats(
      [](const json::object& s) { return count(s, "kv_tokens_in_flight") == 0; });
  ASSERT_EQ(count(stats, "kv_tokens_in_flight"), 0) << "the departed client's demand is freed";
  EXPECT_EQ(post("/v1/chat/completions", big).status, 200) << "it fits once the holder left";

  stats = mock_.stats();
  EXPECT_EQ(count(stats, "kv_admitted"), 3);
  EXPECT_EQ(count(stats, "kv_over_budget"), 1);
  EXPECT_EQ(count(stats, "kv_peak_tokens"), kv_demand(held, 600) + kv_demand(small, 10));
  EXPECT_EQ(count(stats, "kv_peak_demand_tokens"), kv_demand(held, 600) + kv_demand(big, 600));
}

TEST_F(MockTest, KvModelWithoutAnOutputLimitNeeds1024TokensAndResetClearsItsCounters) {
  auto response = post("/v1/chat/completions", kv_body("mock-kv-1024-0"));
  EXPECT_EQ(response.status, 503) << "the prompt and 1024 tokens are more than the whole budget";
  EXPECT_EQ(post("/v1/chat/completions", kv_body("mock-kv-1100-0")).status, 200);
  EXPECT_EQ(post("/v1/chat/completions", kv_body("mock-kv-0-10")).status, 404);
  EXPECT_EQ(post("/v1/chat/completions", kv_body("mock-kv-100")).status, 404);
  ASSERT_EQ(count(mock_.stats(), "kv_over_budget"), 1);

  mock_.reset();

  auto stats = mock_.stats();
  EXPECT_EQ(count(stats, "kv_admitted"), 0);
  EXPECT_EQ(count(stats, "kv_over_budget"), 0);
  EXPECT_EQ(count(stats, "kv_peak_tokens"), 0);
  EXPECT_EQ(count(stats, "kv_peak_demand_tokens"), 0);
}

TEST_F(MockTest, EmbeddingsAnswerOneVectorPerInput) {
  auto response = post("/v1/embeddings", R"({"model":"mock","input":["a","b","c"]})");

  ASSERT_EQ(response.status, 200);
  auto body = response.json().as_object();
  EXPECT_EQ(body.at("object"), "list");
  EXPECT_EQ(body.at("model"), "mock");
  const auto& data = body.at("data").as_array();
  ASSERT_EQ(data.size(), 3u);
  for (std::size_t i = 0; i < data.size(); ++i) {
    EXPECT_EQ(data[i].at("object"), "embedding");
    EXPECT_EQ(data[i].at("index").to_number<std::size_t>(), i);
    const auto& vector = data[i].at("embedding").as_array();
    EXPECT_EQ(vector.size(), data[0].at("embedding").as_array().size());
    EXPECT_FALSE(vector.empty());
    for (const auto& v : vector) EXPECT_TRUE(v.is_number());
  }
  EXPECT_TRUE(body.at("usage").at("prompt_tokens").is_number());
}

TEST_F(MockTest, ModelsListsMockModels) {
  auto response = request("GET", mock_.port(), "/v1/models");

  ASSERT_EQ(response.status, 200);
  auto body = response.json().as_object();
  EXPECT_EQ(body.at("object"), "list");
  EXPECT_EQ(body.at("data").at(0).at("object"), "model");
}

TEST_F(MockTest, KeepAliveConnectionCarriesThreeRequestsOnOneConnection) {
  mock_.reset();
  {
    http_connection connection(mock_.port());
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(connection.request("POST", "/v1/chat/completions", chat_body("mock")).status, 200);
    }
    EXPECT_TRUE(connection.is_open());
  }

  auto stats = mock_.stats();
  EXPECT_EQ(count(stats, "requests"), 3);
  EXPECT_EQ(count(stats, "completed"), 3);
  EXPECT_EQ(count(stats, "connections_opened"), 1);
  const auto& log = stats.at("log").as_array();
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[0].at("connection"), log[2].at("connection"));
}

TEST_F(MockTest, RequestHeadersAreRecordedWithLowerCaseNames) {
  request("POST", mock_.port(), "/v1/chat/completions", chat_body("mock"),
          {{"X-Request-Id", "abc-123"}, {"Authorization", "Bearer k"}});

  auto entry = log_entry(mock_.stats(), 0);
  const auto& headers = entry.at("headers").as_object();
  EXPECT_EQ(headers.at("x-request-id"), "abc-123");
  EXPECT_EQ(headers.at("authorization"), "Bearer k");
  EXPECT_EQ(entry.at("path"), "/v1/chat/completions");
  EXPECT_EQ(entry.at("model"), "mock");
  EXPECT_EQ(entry.at("stream"), false);
  EXPECT_EQ(entry.at("status"), 200);
  EXPECT_EQ(entry.at("outcome"), "completed");
}

TEST(MockPrefixTest, PathPrefixServesTheApiUnderItAndRecordsTheWholePath) {
  mock_options options;
  options.path_prefix = "/some/prefix";
  mock_server mock(options);

  auto answered =
      request("POST", mock.port(), "/some/prefix/v1/chat/completions", chat_body("mock"));
  EXPECT_EQ(answered.status, 200);
  EXPECT_EQ(answered.json().at("object"), "chat.completion");
  EXPECT_EQ(request("POST", mock.port(), "/v1/chat/completions", chat_body("mock")).status, 404)
      << "without the prefix the API is not there";
  EXPECT_EQ(request("GET", mock.port(), "/some/prefix/health").status, 404);
  EXPECT_EQ(request("GET", mock.port(), "/health").status, 200) << "health stays at the root";

  auto stats = mock.stats();
  EXPECT_EQ(count(stats, "requests"), 1);
  EXPECT_EQ(count(stats, "health_checks"), 1);
  EXPECT_EQ(log_entry(stats, 0).at("path"), "/some/prefix/v1/chat/completions");
}

TEST_F(MockTest, ClientCloseDuringHangIsRecordedWithinMilliseconds) {
  stream_options options;
  options.close_after = 100ms;
  auto result = stream_request("POST", mock_.port(), "/v1/chat/completions", chat_body("mock-hang"),
                               {}, options);
  ASSERT_EQ(result.end, stream_end::stopped);
  EXPECT_EQ(result.status, 0) << "mock-hang never answers";
  const double closed_at = epoch_ms(result.ended_at);

  auto stats =
      mock_.wait_for_stats([](const json::object& s) { return count(s, "closed_by_client") == 1; });
  ASSERT_EQ(count(stats, "closed_by_client"), 1);
  EXPECT_EQ(count(stats, "active"), 0);
  EXPECT_EQ(count(stats, "completed"), 0);
  auto entry = log_entry(stats, 0);
  EXPECT_EQ(entry.at("outcome"), "closed_by_client");
  EXPECT_TRUE(entry.at("status").is_null());
  EXPECT_TRUE(entry.at("work_owed_ms").is_null()) << "a hang owes unbounded work";
  ASSERT_TRUE(entry.at("closed_ms").is_double());
  // Generous for a loaded CI machine; the mock sees a close within a millisecond when idle.
  EXPECT_NEAR(entry.at("closed_ms").as_double(), closed_at, 20.0);
}

TEST_F(MockTest, ClientCloseMidDelayRecordsRemainingWorkOwed) {
  stream_options options;
  options.close_after = 300ms;
  auto result = stream_request("POST", mock_.port(), "/v1/chat/completions",
                               chat_body("mock-delay-1000"), {}, options);
  ASSERT_EQ(result.end, stream_end::stopped);

  auto stats =
      mock_.wait_for_stats([](const json::object& s) { return count(s, "closed_by_client") == 1; });
  auto entry = log_entry(stats, 0);
  EXPECT_EQ(entry.at("outcome"), "closed_by_client");
  ASSERT_TRUE(entry.at("work_owed_ms").is_number());
  EXPECT_NEAR(entry.at("work_owed_ms").to_number<double>(), 700.0, 60.0);
  EXPECT_LT(entry.at("closed_ms").as_double() - entry.at("started_ms").as_double(), 360.0);
}

TEST_F(MockTest, ClientCloseMidStreamRecordsChunksSentAndWorkOwed) {
  stream_options options;
  options.timeout = 5s;
  options.on_piece = [](const stream_piece& piece) {
    return piece.bytes.find("piece 2/10") == std::string::npos;
  };
  auto result = stream_request("POST", mock_.port(), "/v1/chat/completions",
                               chat_body("mock-stream-10x50", true), {}, options);
  ASSERT_EQ(result.end, stream_end::stopped);

  auto stats =
      mock_.wait_for_stats([](const json::object& s) { return count(s, "closed_by_client") == 1; });
  auto entry = log_entry(stats, 0);
  EXPECT_EQ(entry.at("outcome"), "closed_by_client");
  EXPECT_EQ(entry.at("status"), 200);
  EXPECT_EQ(entry.at("chunks_sent"), 2);
  EXPECT_NEAR(entry.at("work_owed_ms").to_number<double>(), 400.0, 60.0);
}

TEST_F(MockTest, ThreeConcurrentDelayedRequestsPeakAtThreeActive) {
  mock_.reset();
  std::vector<std::future<http_response>> calls;
  for (int i = 0; i < 3; ++i) {
    calls.push_back(std::async(std::launch::async, [this] {
      return post("/v1/chat/completions", chat_body("mock-delay-200"));
    }));
  }
  for (auto& call : calls) {
    auto response = call.get();
    EXPECT_EQ(response.status, 200);
    EXPECT_GE(response.elapsed.count(), 195.0);
  }

  auto stats = mock_.stats();
  EXPECT_EQ(count(stats, "max_active"), 3);
  EXPECT_EQ(count(stats, "active"), 0);
  EXPECT_EQ(count(stats, "completed"), 3);
}

// A client that closes one connection and then sends on another never had both at work, and the
// mock must not count them together, whichever of the two its event loop happens to read first.
// With the mock stopped, the second connection is made ready (its first byte) before the first
// one closes, so that one pass of the loop lists it first: the close must still be counted first.
TEST_F(MockTest, ACloseThatCameBeforeARequestIsCountedBeforeIt) {
  auto whole = [](const std::string& model) {
    const auto body = chat_body(model);
    return "POST /v1/chat/completions HTTP/1.1\r\nhost: mock\r\ncontent-type: "
           "application/json\r\ncontent-length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  };
  raw_connection next(mock_.port());
  next.send(whole("mock"));  // served at once: the connection is accepted and idle
  ASSERT_NE(next.read_until("\r\n\r\n").find("200 OK"), std::string::npos);
  raw_connection leaving(mock_.port());
  leaving.send(whole("mock-hang"));
  ASSERT_EQ(
      count(mock_.wait_for_stats([](const json::object& s) { return count(s, "active") == 1; }),
            "active"),
      1);
  const auto second = whole("mock-delay-50");
  mock_.process().send_signal(SIGSTOP);
  next.send(second.substr(0, 1));
  leaving.close();
  next.send(second.substr(1));
  mock_.process().send_signal(SIGCONT);
  auto stats =
      mock_.wait_for_stats([](const json::object& s) { return count(s, "completed") == 2; });
  ASSERT_EQ(count(stats, "completed"), 2);
  EXPECT_EQ(count(stats, "closed_by_client"), 1);
  EXPECT_EQ(count(stats, "max_active"), 1) << "the close was counted after the next request";
  const auto hang = log_entry(stats, 1);
  const auto later = log_entry(stats, 2);
  ASSERT_EQ(hang.at("outcome"), "closed_by_client");
  EXPECT_GE(later.at("started_ms").as_double(), hang.at("closed_ms").as_double());
}

// A request whose client had closed the connection before the mock read it (a gateway cut it
// while it waited unread) is logged as closed by its client, but was never work: the mock would
// stop it at once, so it does not count towards active or max_active.
TEST_F(MockTest, ARequestWhoseClientLeftBeforeItWasReadIsNeverCountedAsWork) {
  const auto body = chat_body("mock-hang", true);
  const auto whole =
      "POST /v1/chat/completions HTTP/1.1\r\nhost: mock\r\ncontent-type: "
      "application/json\r\ncontent-length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  raw_connection gone(mock_.port());
  // Accepted and idle before the stop, so that only the request and the close wait unread.
  mock_.wait_for_stats([](const json::object& s) { return count(s, "connections_open") >= 1; });
  mock_.process().send_signal(SIGSTOP);
  gone.send(whole);
  gone.close();
  mock_.process().send_signal(SIGCONT);
  auto stats =
      mock_.wait_for_stats([](const json::object& s) { return count(s, "closed_by_client") == 1; });
  ASSERT_EQ(count(stats, "closed_by_client"), 1);
  EXPECT_EQ(count(stats, "requests"), 1);
  EXPECT_EQ(count(stats, "active"), 0);
  EXPECT_EQ(count(stats, "max_active"), 0) << "a request read after its client left was counted";
  const auto entry = log_entry(stats, 0);
  EXPECT_EQ(entry.at("model"), "mock-hang");
  EXPECT_EQ(entry.at("started_ms"), entry.at("ended_ms"));
}

TEST_F(MockTest, ResetClearsCountersLogAndFlakySequence) {
  post("/v1/chat/completions", chat_body("mock-flaky-50"));
  post("/v1/chat/completions", chat_body("mock"));
  ASSERT_EQ(count(mock_.stats(), "requests"), 2);

  mock_.reset();

  auto stats = mock_.stats();
  EXPECT_EQ(count(stats, "requests"), 0);
  EXPECT_EQ(count(stats, "completed"), 0);
  EXPECT_EQ(count(stats, "max_active"), 0);
  EXPECT_EQ(count(stats, "connections_opened"), 0);
  EXPECT_TRUE(stats.at("log").as_array().empty());
  EXPECT_EQ(post("/v1/chat/completions", chat_body("mock-flaky-50")).status, 200)
      << "the flaky sequence restarts at request 0";
}

TEST_F(MockTest, StatsSinceLimitsTheLogToLaterIds) {
  post("/v1/chat/completions", chat_body("mock"));
  post("/v1/chat/completions", chat_body("mock"));
  auto first_id = log_entry(mock_.stats(), 0).at("id").to_number<std::uint64_t>();

  auto later = mock_.stats(first_id);
  ASSERT_EQ(later.at("log").as_array().size(), 1u);
  EXPECT_EQ(log_entry(later, 0).at("id").to_number<std::uint64_t>(), first_id + 1);
}

TEST_F(MockTest, ConnectionCloseRequestIsAnsweredThenClosed) {
  raw_connection raw(mock_.port());
  auto body = chat_body("mock");
  raw.send(
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body);

  auto reply = raw.read_until_closed(5s);
  EXPECT_TRUE(raw.peer_closed());
  EXPECT_EQ(reply.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << reply;
  EXPECT_NE(reply.find("chat.completion"), std::string::npos);
}

TEST_F(MockTest, MalformedRequestIsRefusedWith400AndClosed) {
  raw_connection raw(mock_.port());
  raw.send("NOT HTTP AT ALL\r\n\r\n");

  auto reply = raw.read_until_closed(5s);
  EXPECT_TRUE(raw.peer_closed());
  EXPECT_EQ(reply.rfind("HTTP/1.1 400", 0), 0u) << reply;
}

TEST_F(MockTest, SigtermEndsTheMockWithExitCodeZero) {
  mock_.process().send_signal(SIGTERM);
  EXPECT_EQ(mock_.process().wait_exit(5s), 0);
}

TEST(MockTlsTest, TlsMockServesHttpsOnlyAndReportsTls) {
  temp_dir dir;
  auto cert = (dir.path() / "cert.pem").string();
  auto key = (dir.path() / "key.pem").string();
  child_process openssl("openssl", {"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj",
                                    "/CN=127.0.0.1", "-days", "1", "-keyout", key, "-out", cert});
  auto code = openssl.wait_exit(30s);
  if (code != 0) GTEST_SKIP() << "openssl cannot make a test certificate";

  mock_options options;
  options.tls_cert = cert;
  options.tls_key = key;
  mock_server mock(options);
  ASSERT_TRUE(mock.tls());
  EXPECT_EQ(mock.url().rfind("https://", 0), 0u);
  auto listening = mock.process().wait_for_line(std::regex(R"(listening on .*\(tls\)$)"), 1s);
  EXPECT_TRUE(listening.has_value());

  auto response = https_request("POST", mock.port(), "/v1/chat/completions", chat_body("mock"));
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.json().at("object"), "chat.completion");
  EXPECT_EQ(count(mock.stats(), "completed"), 1);
  EXPECT_THROW(request("GET", mock.port(), "/v1/models", {}, {}, 2s), http_error)
      << "plain HTTP is not served on a TLS port";
}

}  // namespace
}  // namespace tether::test
