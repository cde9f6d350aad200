// Secrets and prompts never reach a log line, an error body or a span (issue #5): a run that
// exercises every locally producible outcome at debug level, with planted markers.
#include <gtest/gtest.h>

#include <openssl/evp.h>

#include <future>

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
  std::vector<http_response> answers;
  auto post = [&](const std::string& b, const header_map& h) {
    answers.push_back(request("POST", gw.port(), "/v1/chat/completions", b, h, 10s));
  };
  post(body("chat"), auth);       // ok
  post(body("rejecting"), auth);  // upstream_rejected
  post(body("failing"), auth);    // upstream_failed
  post(body("hang"), auth);       // upstream_timeout
  header_map short_budget = auth;
  short_budget.push_back({"x-request-deadline-ms", "50"});
  post(body("hang"), short_budget);                                          // deadline_exceeded
  post(body("chat"), {{"authorization", "Bearer wrong-" + gateway_token}});  // unauthorized
  post(body("nope"), auth);                                                  // unknown_model
  post("{\"model\":\"chat\",\"x\":\"" + prompt_marker + "\" broken", auth);  // bad_request
  post(body("chat") + std::string(5000, ' '), auth);                         // payload_too_large
  post(body("streamer", true), auth);                                        // ok, streamed
  stream_options leave;
  leave.close_after = 100ms;
  stream_request("POST", gw.port(), "/v1/chat/completions", body("hang"), auth, leave);

  ASSERT_EQ(await_access_lines(gw, 11), 11u);
  ASSERT_EQ(access_lines(gw).size(), 11u);
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
