// upstream_stream = "always" (contract, "The work ends in the engine"): a caller who did not ask
// for a stream is answered whole, with the body the upstream's own whole answer has, while the
// upstream was asked for a stream (and, on chat and completions, for its usage). An
// as_requested upstream is asked as the caller asked. tether-mock streams and answers whole with
// the same text and counts, so the two answers can be compared field by field.
#include <gtest/gtest.h>

#include <ostream>
#include <regex>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

namespace json = boost::json;

struct case_surface {
  std::string path;
  std::string body;  // no whitespace between members: tether's stream request keeps their bytes
  bool with_usage = false;
};

void PrintTo(const case_surface& s, std::ostream* os) {
  *os << s.path;
}

const case_surface chat{"/v1/chat/completions",
                        R"({"model":"M","messages":[{"role":"user","content":"hello"}]})", true};
const case_surface completions{"/v1/completions", R"({"model":"M","prompt":"hello"})", true};
const case_surface responses{"/v1/responses", R"({"model":"M","input":"hello"})", false};
const case_surface messages{
    "/v1/messages",
    R"({"model":"M","max_tokens":16,"messages":[{"role":"user","content":"hello"}]})", false};

std::string with_model(std::string body, const std::string& model) {
  body.replace(body.find("\"M\""), 3, "\"" + model + "\"");
  return body;
}

// The body tether sends an always upstream for a caller's `body` that has no stream member.
std::string stream_request_body(const std::string& body, bool with_usage) {
  return (with_usage ? R"({"stream":true,"stream_options":{"include_usage":true},)"
                     : R"({"stream":true,)") +
         body.substr(1);
}

std::int64_t mock_prompt_tokens(const std::string& sent) {
  return static_cast<std::int64_t>(sent.size() / 4 + 1);
}

std::string config(const mock_server& mock) {
  std::string c = "[server]\nlisten = \"127.0.0.1:0\"\n\n[request]\nmax_retries = 0\n\n";
  for (const char* name : {"always", "plain"}) {
    c += "[[upstreams]]\nname = \"" + std::string(name) + "\"\nbase_url = \"" + mock.url() +
         "\"\n" + every_surface + "\nmax_in_flight = 8\nupstream_stream = \"" +
         (std::string(name) == "always" ? "always" : "as_requested") + "\"\n\n";
    c += "[[models]]\nname = \"" + std::string(name) + "\"\nupstream = \"" + name +
         "\"\nupstream_model = \"mock\"\n\n";
  }
  // Three whole events, then half of one and the connection's end.
  c += "[[models]]\nname = \"cut\"\nupstream = \"always\"\nupstream_model = \"mock-sse-cut\"\n\n";
  return c + "[telemetry]\nlog_format = \"json\"\n";
}

// The mock's request number in an answer's id (chatcmpl-mock-N, cmpl-mock-N, resp_mock_N,
// msg_mock_N).
std::string number_in(const json::object& answer) {
  std::smatch m;
  const auto id = str(answer.at("id"));
  EXPECT_TRUE(std::regex_search(id, m, std::regex("[0-9]+$"))) << id;
  return m.str();
}

// Checks that each of the answer's times is a Unix time of this moment, then zeroes it: the
// mock stamps each answer as it makes it.
void check_and_clear_times(json::value& v) {
  const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  if (auto* o = v.if_object()) {
    for (auto& [key, value] : *o) {
      if (key == "created" || key == "created_at" || key == "completed_at") {
        ASSERT_TRUE(value.is_int64()) << key;
        EXPECT_NEAR(static_cast<double>(value.as_int64()), static_cast<double>(now), 30) << key;
        value = 0;
      } else {
        check_and_clear_times(value);
      }
    }
  } else if (auto* a = v.if_array()) {
    for (auto& e : *a) check_and_clear_times(e);
  }
}

// The counts that follow from the prompt's bytes: the mock counts a prompt by the bytes it got.
void set_prompt_tokens(json::object& answer, std::int64_t prompt) {
  auto& usage = answer.at("usage").as_object();
  const char* input = usage.contains("prompt_tokens") ? "prompt_tokens" : "input_tokens";
  const char* output = usage.contains("completion_tokens") ? "completion_tokens" : "output_tokens";
  usage[input] = prompt;
  if (usage.contains("total_tokens")) usage["total_tokens"] = prompt + usage.at(output).as_int64();
}

class UpstreamStreamTest : public ::testing::TestWithParam<case_surface> {};

TEST_P(UpstreamStreamTest, ANonStreamingCallerGetsTheWholeAnswerAssembledFromAStream) {
  mock_server mock;
  gateway_process gw{config(mock)};
  const auto& s = GetParam();

  // The mock's own whole answer to the caller's request.
  auto direct = request("POST", mock.port(), s.path, with_model(s.body, "mock"));
  ASSERT_EQ(direct.status, 200) << direct.body;

  auto via = request("POST", gw.port(), s.path, with_model(s.body, "always"));
  ASSERT_EQ(via.status, 200) << via.body;
  ASSERT_NE(via.header("content-type"), nullptr);
  EXPECT_EQ(*via.header("content-type"), "application/json");
  EXPECT_EQ(via.body.find("data:"), std::string::npos) << via.body;

  // What the mock saw: a stream asked for, as an event stream.
  auto log = mock_log(mock.stats());
  ASSERT_EQ(log.size(), 2u);
  EXPECT_FALSE(log[0].at("stream").as_bool());
  EXPECT_TRUE(log[1].at("stream").as_bool()) << "the always upstream was not asked for a stream";
  EXPECT_EQ(str(log[1].at("headers").at("accept")), "text/event-stream");

  // Field by field: the same answer but for what differs per request by nature (the mock's
  // request number in ids and text, the time, and the prompt's count of the bytes it got).
  auto via_json = json::parse(via.body);
  auto direct_text = json::serialize(direct.json());
  const auto n_direct = number_in(direct.json().as_object());
  const auto n_via = number_in(via_json.as_object());
  ASSERT_NE(n_direct, n_via);
  direct_text =
      std::regex_replace(direct_text, std::regex("(mock[-_]|#)" + n_direct + "\\b"),
                         "$01" + n_via);  // $01: a group number of two digits, the id follows
  auto expected = json::parse(direct_text);
  check_and_clear_times(expected);
  check_and_clear_times(via_json);
  set_prompt_tokens(expected.as_object(), mock_prompt_tokens(stream_request_body(
                                              with_model(s.body, "mock"), s.with_usage)));
  EXPECT_EQ(via_json, expected) << "assembled: " << via.body << "\nwhole: " << direct.body;
  // Usage was in the stream: the access line counts it.
  ASSERT_GE(await_access_lines(gw, 1), 1u);
  auto line = access_lines(gw).back();
  EXPECT_FALSE(line.at("stream").as_bool());
  EXPECT_EQ(line.at("completion_tokens").as_int64(), 5);
}

TEST_P(UpstreamStreamTest, AnAsRequestedUpstreamIsAskedAsTheCallerAsked) {
  mock_server mock;
  gateway_process gw{config(mock)};
  const auto& s = GetParam();
  auto plain = request("POST", gw.port(), s.path, with_model(s.body, "plain"));
  ASSERT_EQ(plain.status, 200) << plain.body;
  auto log = mock_log(mock.stats());
  ASSERT_EQ(log.size(), 1u);
  EXPECT_FALSE(log[0].at("stream").as_bool());
  EXPECT_FALSE(log[0].at("headers").as_object().contains("accept"));
}

INSTANTIATE_TEST_SUITE_P(Surfaces, UpstreamStreamTest,
                         ::testing::Values(chat, completions, responses, messages),
                         [](const auto& info) {
                           auto name = info.param.path.substr(4);
                           std::replace(name.begin(), name.end(), '/', '_');
                           return name;
                         });

// A caller who asks for a stream is relayed event by event as before, and embeddings (which
// never stream) go whole, on an always upstream too.
TEST(UpstreamStreamTest, AStreamingCallerAndEmbeddingsAreUnchanged) {
  mock_server mock;
  gateway_process gw{config(mock)};
  auto s = request("POST", gw.port(), "/v1/chat/completions", chat_body("always", true));
  ASSERT_EQ(s.status, 200);
  EXPECT_EQ(*s.header("content-type"), "text/event-stream");
  EXPECT_NE(s.body.find("data: [DONE]"), std::string::npos);
  auto e = request("POST", gw.port(), "/v1/embeddings", R"({"model":"always","input":"hi"})");
  ASSERT_EQ(e.status, 200) << e.body;
  auto log = mock_log(mock.stats());
  ASSERT_EQ(log.size(), 2u);
  EXPECT_TRUE(log[0].at("stream").as_bool());
  // The mock ignores an embeddings request's `stream`: whether it was asked for one shows in the
  // head.
  EXPECT_FALSE(log[1].at("headers").as_object().contains("accept")) << log[1];
}

// A stream cut mid-event (half an event, then the connection's end) is not an answer: the
// attempt fails (the caller, with no retries, gets a 502), never a half answer. (A stream that
// ends cleanly before its terminal event fails in the assembler: its unit tests.)
TEST(UpstreamStreamTest, AStreamCutBeforeItsEndIsAFailedAttempt) {
  mock_server mock;
  gateway_process gw{config(mock)};
  auto r = request("POST", gw.port(), "/v1/chat/completions",
                   R"({"model":"cut","messages":[{"role":"user","content":"hello"}]})");
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_EQ(r.body.find("data:"), std::string::npos) << r.body;
  auto log = mock_log(mock.stats());
  ASSERT_EQ(log.size(), 1u);
  EXPECT_TRUE(log[0].at("stream").as_bool());
  ASSERT_GE(await_access_lines(gw, 1), 1u);
  auto line = access_lines(gw).back();
  ASSERT_EQ(line.at("attempts").as_array().size(), 1u);
  EXPECT_EQ(str(line.at("attempts").at(0).at("outcome")), "upstream_failed") << line;
}

}  // namespace
}  // namespace tether::test
