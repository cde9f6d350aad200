// Per-key rpm and tpm over a sliding minute (contract: "Token-aware admission"): past them the
// gateway answers 429 rate_limited with Retry-After itself, and the upstream never sees the
// request. Tokens are charged by estimate and corrected by the usage the upstream reports.
#include <gtest/gtest.h>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

const std::string token = "tok-rate-0123456789";

std::string limited_gateway(const mock_server& mock, const std::string& limits) {
  return gateway_config(mock, "max_retries = 0",
                        model_entry("m", "mock") + model_entry("claude", "mock-stream-4x20"),
                        "[[keys]]\nname = \"team\"\nsha256 = \"" + sha256_hex(token) +
                            "\"\nmodels = [\"*\"]\n" + limits + "\n");
}

header_map as_team(const std::string& id = "") {
  header_map h{{"authorization", "Bearer " + token}};
  if (!id.empty()) h.emplace_back("x-request-id", id);
  return h;
}

std::string body_with_max_tokens(int max_tokens) {
  return R"({"model":"m","max_tokens":)" + std::to_string(max_tokens) +
         R"(,"messages":[{"role":"user","content":"hello"}]})";
}

TEST(RateLimitTest, TheRequestPastTheKeysRpmIs429WithRetryAfterAndNeverReachesTheUpstream) {
  mock_server mock;
  gateway_process gw{limited_gateway(mock, "rpm = 5")};
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(request("POST", gw.port(), "/v1/chat/completions", chat_body("m"), as_team()).status,
              200)
        << i;
  }
  auto sixth = request("POST", gw.port(), "/v1/chat/completions", chat_body("m"), as_team("sixth"));
  EXPECT_EQ(sixth.status, 429);
  EXPECT_EQ(str(sixth.json().at("error").at("code")), "rate_limited");
  EXPECT_EQ(str(sixth.json().at("error").at("type")), "rate_limit_error");
  EXPECT_NE(str(sixth.json().at("error").at("message")).find("rpm (5"), std::string::npos);
  ASSERT_NE(sixth.header("retry-after"), nullptr);
  const auto wait_s = std::stoi(*sixth.header("retry-after"));
  EXPECT_GE(wait_s, 55);  // the first request leaves the minute about a minute after it came
  EXPECT_LE(wait_s, 60);
  ASSERT_NE(sixth.header("x-tether-outcome"), nullptr);
  EXPECT_EQ(*sixth.header("x-tether-outcome"), "rate_limited");
  EXPECT_EQ(mock.stats().at("requests").as_int64(), 5) << "the upstream saw the refused request";
  EXPECT_EQ(metric(gw.port(), "tether_rate_limited_total{key=\"team\"}"), 1);
  auto line = access_line(gw, "sixth");
  ASSERT_TRUE(line);
  EXPECT_EQ(str(line->at("outcome")), "rate_limited");
  EXPECT_EQ(str(line->at("key")), "team");
  EXPECT_TRUE(line->at("attempts").as_array().empty());
  // Another surface, the same count: Anthropic-shaped.
  auto messages = request("POST", gw.port(), "/v1/messages",
                          R"({"model":"claude","max_tokens":10,"messages":[]})", as_team());
  EXPECT_EQ(messages.status, 429);
  EXPECT_EQ(str(messages.json().at("error").at("type")), "rate_limit_error");
}

// The prompt tokens tether-mock reports: a quarter of the body it was sent, plus one.
std::int64_t mock_prompt_tokens(const std::string& body_sent) {
  return static_cast<std::int64_t>(body_sent.size() / 4 + 1);
}

// tpm = 1000, each request estimated at 19 prompt tokens (its 77 bytes) + max_tokens 400: two
// estimates fill the minute, but each uses what the mock reports (21 prompt + 5 completion), so
// with the correction many more fit.
TEST(RateLimitTest, TheTokensChargedAreCorrectedToTheUsageTheUpstreamReports) {
  mock_server mock;
  gateway_process gw{limited_gateway(mock, "tpm = 1000")};
  ASSERT_EQ(body_with_max_tokens(400).size(), 77u);
  for (int i = 0; i < 8; ++i) {
    auto r = request("POST", gw.port(), "/v1/chat/completions", body_with_max_tokens(400),
                     as_team("t" + std::to_string(i)));
    ASSERT_EQ(r.status, 200) << i << ": the estimates were not corrected";
    // The correction is sent as the request's tree ends, just after its answer.
    ASSERT_GE(await_access_lines(gw, static_cast<std::size_t>(i + 1)),
              static_cast<std::size_t>(i + 1));
  }
  // The mock is sent the body with the deployment's model name.
  auto sent = body_with_max_tokens(400);
  sent.replace(sent.find("\"m\""), 3, "\"mock\"");
  const auto prompt = mock_prompt_tokens(sent);
  ASSERT_EQ(prompt, 21);
  auto line = access_line(gw, "t0");
  ASSERT_TRUE(line);
  EXPECT_EQ(str(line->at("key")), "team");
  EXPECT_EQ(line->at("prompt_tokens").as_int64(), prompt);
  EXPECT_EQ(line->at("completion_tokens").as_int64(), 5);
  // By the model's public name (the mock was sent "mock"); the mock reports no cached tokens,
  // and the model has no prices.
  const std::string series = R"(tether_tokens_total{key="team",upstream="mock",model="m",kind=)";
  EXPECT_EQ(metric(gw.port(), series + R"("prompt"})"), 8 * prompt);
  EXPECT_EQ(metric(gw.port(), series + R"("completion"})"), 8 * 5);
  // Zeros read as lines, not through metric(), which reads a counter's absent series as 0.
  const auto text = request("GET", gw.port(), "/metrics").body;
  for (const auto& zero : {series + R"("cached"} 0)", series + R"("waste"} 0)",
                           std::string{R"(tether_spend_usd_total{key="team",model="m"} 0)"}}) {
    EXPECT_NE(text.find("\n" + zero + "\n"), std::string::npos) << zero << "\n" << text;
  }
  // 8 × 26 = 208 used: an estimate of 19 + 770 = 789 fits, one of 19 + 900 does not.
  EXPECT_EQ(request("POST", gw.port(), "/v1/chat/completions", body_with_max_tokens(900), as_team())
                .status,
            429);
  EXPECT_EQ(request("POST", gw.port(), "/v1/chat/completions", body_with_max_tokens(770), as_team())
                .status,
            200);
  // Heavier than the whole tpm: waiting cannot help, so it is a 400, not a 429.
  auto never =
      request("POST", gw.port(), "/v1/chat/completions", body_with_max_tokens(5000), as_team());
  EXPECT_EQ(never.status, 400);
  EXPECT_EQ(never.header("retry-after"), nullptr);
  EXPECT_EQ(mock.stats().at("requests").as_int64(), 9);
}

// A stream's usage is read from its events as they are relayed (Anthropic: the input in
// message_start, the output in message_delta), not from a buffered copy.
TEST(RateLimitTest, AStreamsReportedUsageIsReadFromItsEvents) {
  mock_server mock;
  gateway_process gw{limited_gateway(mock, "tpm = 100000")};
  const std::string body = R"({"model":"claude","max_tokens":100,"stream":true,"messages":[]})";
  auto s = request("POST", gw.port(), "/v1/messages", body, as_team("stream"));
  ASSERT_EQ(s.status, 200);
  EXPECT_NE(s.body.find("message_stop"), std::string::npos);
  ASSERT_GE(await_access_lines(gw, 1), 1u);
  auto line = access_line(gw, "stream");
  ASSERT_TRUE(line);
  auto sent = body;
  sent.replace(sent.find("claude"), 6, "mock-stream-4x20");
  EXPECT_EQ(line->at("prompt_tokens").as_int64(), mock_prompt_tokens(sent));
  EXPECT_EQ(line->at("completion_tokens").as_int64(), 4);
}

TEST(RateLimitTest, AKeyWithoutLimitsAndAGatewayWithoutKeysAreNotCounted) {
  mock_server mock;
  gateway_process gw{gateway_config(mock, "max_retries = 0", model_entry("m", "mock"))};
  for (int i = 0; i < 20; ++i)
    ASSERT_EQ(request("POST", gw.port(), "/v1/chat/completions", chat_body("m")).status, 200);
  auto line = access_lines(gw).back();
  EXPECT_TRUE(line.at("key").is_null());
  EXPECT_EQ(line.at("completion_tokens").as_int64(), 5);
}

}  // namespace
}  // namespace tether::test
