// Secrets and prompts never reach a log line, an error body or a span (issue #5): a run that
// exercises every locally producible outcome at debug level, with planted markers.
#include <gtest/gtest.h>

#include <openssl/evp.h>

#include <future>
#include <string>
#include <vector>

#include "tests/integration/harness.hpp"
#include "tests/support/otlp_receiver.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

const std::string upstream_key = "sk-UPSTREAM-SECRET-4711";
const std::string gateway_token = "GATEWAY-TOKEN-SECRET-0815";
const std::string prompt_marker = "PROMPT-MARKER-SECRET-1234";

std::string sha256_hex(const std::string& s) {
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(s.data(), s.size(), d, &n, EVP_sha256(), nullptr);
  std::string out;
  static const char* hex = "0123456789abcdef";
  for (unsigned int i = 0; i < n; ++i) {
    out.push_back(hex[d[i] >> 4]);
    out.push_back(hex[d[i] & 15]);
  }
  return out;
}

TEST(SecretsTest, NoKeyOrPromptAppearsInLogsSpansOrErrorBodies) {
  mock_server mock;
  otlp_receiver otlp;
  std::string models = model_entry("chat", "mock") + model_entry("rejecting", "mock-fail-400") +
                       model_entry("failing", "mock-fail-503") + model_entry("hang", "mock-hang") +
                       model_entry("streamer", "mock-stream-3x20");
  auto cfg =
      gateway_config(mock, "deadline_ms = 3000\nattempt_timeout_ms = 200\nmax_retries = 1", models,
                     "[[keys]]\nname = \"team\"\nsha256 = \"" + sha256_hex(gateway_token) +
                         "\"\nmodels = [\"chat\", \"rejecting\", \"failing\", \"hang\", "
                         "\"streamer\"]\n",
                     "max_request_bytes = 4096");
  cfg.insert(cfg.find("max_in_flight = 64"), "api_key_env = \"TETHER_SECRET_KEY\"\n");
  cfg += "log_level = \"debug\"\notlp_endpoint = \"" + otlp.endpoint() + "\"\n";
  gateway_process gw{cfg, {{"TETHER_SECRET_KEY", upstream_key}}};

  header_map auth{{"authorization", "Bearer " + gateway_token}};
  auto body = [&](const std::string& model, bool stream = false) {
    return R"({"model":")" + model + R"(","stream":)" + (stream ? "true" : "false") +
           R"(,"messages":[{"role":"user","content":")" + prompt_marker + R"("}]})";
  };
  // Each request plants one outcome, so that each path's logging is exercised: the answer it
  // got and its access line say the outcome was reached, not merely asked for.
  struct planted {
    std::string body;
    header_map headers;
    int status;
    std::string outcome;
  };
  header_map short_budget = auth;
  short_budget.push_back({"x-request-deadline-ms", "50"});
  const std::vector<planted> plants{
      {body("chat"), auth, 200, "ok"},
      {body("rejecting"), auth, 400, "upstream_rejected"},
      {body("failing"), auth, 502, "upstream_failed"},
      {body("hang"), auth, 504, "upstream_timeout"},
      {body("hang"), short_budget, 504, "deadline_exceeded"},
      {body("chat"), {{"authorization", "Bearer wrong-" + gateway_token}}, 401, "unauthorized"},
      {body("nope"), auth, 404, "unknown_model"},
      {"{\"model\":\"chat\",\"x\":\"" + prompt_marker + "\" broken", auth, 400, "bad_request"},
      {body("chat") + std::string(5000, ' '), auth, 413, "payload_too_large"},
      {body("streamer", true), auth, 200, "ok"},
  };
  std::vector<http_response> answers;
  for (std::size_t i = 0; i < plants.size(); ++i) {
    const auto& p = plants[i];
    auto h = p.headers;
    h.push_back({"x-request-id", "planted-" + std::to_string(i)});
    answers.push_back(request("POST", gw.port(), "/v1/chat/completions", p.body, h, 10s));
    const auto& a = answers.back();
    EXPECT_EQ(a.status, p.status) << p.outcome << ": " << a.body;
    // The upstream's own 4xx is passed through as it wrote it: its code is not tether's.
    if (a.status == p.status && p.status >= 400 && p.outcome != "upstream_rejected") {
      EXPECT_EQ(str(a.json().at("error").at("code")), p.outcome) << a.body;
    }
    const auto* said = a.header("x-tether-outcome");
    ASSERT_NE(said, nullptr) << p.outcome;
    EXPECT_EQ(*said, p.outcome);
  }
  stream_options leave;
  leave.close_after = 100ms;
  auto leaving = auth;
  leaving.push_back({"x-request-id", "planted-leaver"});
  stream_request("POST", gw.port(), "/v1/chat/completions", body("hang"), leaving, leave);

  ASSERT_EQ(await_access_lines(gw, 11), 11u);
  ASSERT_EQ(access_lines(gw).size(), 11u);
  for (std::size_t i = 0; i < plants.size(); ++i) {
    auto line = access_line(gw, "planted-" + std::to_string(i));
    ASSERT_TRUE(line) << "no access line for " << plants[i].outcome;
    EXPECT_EQ(str(line->at("outcome")), plants[i].outcome);
  }
  auto left = access_line(gw, "planted-leaver");
  ASSERT_TRUE(left);
  EXPECT_EQ(str(left->at("outcome")), "client_disconnected");
  otlp.wait_for_spans([](const auto& s) { return s.size() >= 10; });

  // The markers did travel where they belong: the key upstream, the prompt in the body.
  auto seen = mock_log(mock.stats());
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(str(seen[0].at("headers").at("authorization")), "Bearer " + upstream_key);

  // ...and nowhere else.
  std::string logs = gw.process().output();
  std::string spans;
  for (const auto& b : otlp.bodies()) spans += b;
  std::string error_bodies;
  for (const auto& a : answers) {
    if (a.status >= 400) error_bodies += a.body;
  }
  ASSERT_FALSE(logs.empty());
  ASSERT_FALSE(spans.empty());
  ASSERT_FALSE(error_bodies.empty());
  for (const auto& secret : {upstream_key, gateway_token, prompt_marker,
                             std::string{"mock response"} /* a completion */}) {
    EXPECT_EQ(logs.find(secret), std::string::npos) << secret << " in the logs";
    EXPECT_EQ(spans.find(secret), std::string::npos) << secret << " in a span";
    EXPECT_EQ(error_bodies.find(secret), std::string::npos) << secret << " in an error body";
  }
}

TEST(SecretsTest, CheckOutputMasksKeysAndDigests) {
  temp_dir dir;
  auto digest = sha256_hex(gateway_token);
  auto path = dir.write_file(
      "t.toml",
      "[[upstreams]]\nname = \"u\"\nbase_url = \"http://127.0.0.1:9\"\napi_key_env = "
      "\"TETHER_SECRET_KEY\"\n[[models]]\nname = \"m\"\nupstream = \"u\"\n[[keys]]\n"
      "name = \"k\"\nsha256 = \"" +
          digest + "\"\nmodels = [\"*\"]\n");
  child_process p{
      TETHER_BINARY, {"check", "--config", path.string()}, {{"TETHER_SECRET_KEY", upstream_key}}};
  ASSERT_EQ(p.wait_exit(10s), std::optional<int>(0)) << p.output();
  EXPECT_EQ(p.output().find(upstream_key), std::string::npos);
  EXPECT_EQ(p.output().find(digest), std::string::npos);
}

}  // namespace
}  // namespace tether::test
