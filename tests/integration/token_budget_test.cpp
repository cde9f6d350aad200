// Token-weighted admission (contract: "Token-aware admission"): each request's token weight is
// held against its upstream's max_tokens_in_flight from the grant until its connection actor
// exits, like a slot; a request heavier than the whole cap is refused before any attempt.
#include <gtest/gtest.h>

#include <future>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

// The mock upstream with a token cap; slots are plenty (64), so only tokens limit the work.
std::string token_capped(const mock_server& mock, std::uint64_t cap, const std::string& models,
                         const std::string& request_keys = "max_retries = 0") {
  auto cfg = gateway_config(mock, request_keys, models);
  const std::string slots = "max_in_flight = 64\n";
  cfg.replace(cfg.find(slots), slots.size(),
              slots + "max_tokens_in_flight = " + std::to_string(cap) + "\n");
  return cfg;
}

std::string body_with_max_tokens(const std::string& model, int max_tokens) {
  return R"({"model":")" + model + R"(","max_tokens":)" + std::to_string(max_tokens) +
         R"(,"messages":[{"role":"user","content":"hello"}]})";
}

const std::string tokens_gauge = "tether_upstream_tokens_in_flight{upstream=\"mock\"}";

// Four callers whose 600-token requests each fit the cap of 1000 alone, but no two together:
// the upstream works on one at a time, and every caller is served.
TEST(TokenBudgetTest, RequestsWhoseWeightsDoNotFitTogetherRunOneAtATime) {
  mock_server mock;
  gateway_process gw{token_capped(mock, 1000, model_entry("slow", "mock-delay-300"))};
  std::vector<std::future<http_response>> calls;
  for (int i = 0; i < 4; ++i) {
    calls.push_back(std::async(std::launch::async, [&gw] {
      return request("POST", gw.port(), "/v1/chat/completions", body_with_max_tokens("slow", 600));
    }));
  }
  for (auto& c : calls) EXPECT_EQ(c.get().status, 200);
  const auto stats = mock.stats();
  EXPECT_EQ(stats.at("requests").as_int64(), 4);
  EXPECT_EQ(stats.at("max_active").as_int64(), 1);
  // Every weight went back with its connection actor's exit (just after the answers).
  EXPECT_TRUE(await_metric(gw.port(), tokens_gauge, 0, 2s));
}

// Without a max_tokens the model's default_max_tokens is the output weight.
TEST(TokenBudgetTest, ARequestNamingNoOutputLimitWeighsItsModelsDefault) {
  mock_server mock;
  gateway_process gw{
      token_capped(mock, 1000,
                   model_entry("light", "mock-delay-300", "default_max_tokens = 100") +
                       model_entry("heavy", "mock-delay-300", "default_max_tokens = 700"))};
  auto both = [&](const std::string& model) {
    auto a = std::async(std::launch::async, [&] {
      return request("POST", gw.port(), "/v1/chat/completions", chat_body(model));
    });
    auto b = request("POST", gw.port(), "/v1/chat/completions", chat_body(model));
    EXPECT_EQ(a.get().status, 200);
    EXPECT_EQ(b.status, 200);
  };
  both("light");  // 2 × (prompt + 100) fit together
  EXPECT_EQ(mock.stats().at("max_active").as_int64(), 2);
  mock.reset();
  both("heavy");  // 2 × (prompt + 700) do not
  EXPECT_EQ(mock.stats().at("max_active").as_int64(), 1);
}

TEST(TokenBudgetTest, ARequestHeavierThanTheWholeCapIsRefusedWithoutAnAttempt) {
  mock_server mock;
  gateway_process gw{token_capped(mock, 1000, model_entry("m", "mock"))};
  auto r = request("POST", gw.port(), "/v1/chat/completions", body_with_max_tokens("m", 5000),
                   {{"x-request-id", "heavy"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(str(r.json().at("error").at("code")), "bad_request");
  const auto message = str(r.json().at("error").at("message"));
  EXPECT_NE(message.find("max_tokens_in_flight (1000)"), std::string::npos) << message;
  EXPECT_EQ(message.find("hello"), std::string::npos) << "the prompt is never quoted";
  EXPECT_EQ(mock.stats().at("requests").as_int64(), 0);
  // At the cap exactly: admitted; one token more: refused. (A 77-byte body: 19 prompt tokens.)
  ASSERT_EQ(body_with_max_tokens("m", 981).size(), 77u);
  EXPECT_EQ(
      request("POST", gw.port(), "/v1/chat/completions", body_with_max_tokens("m", 981)).status,
      200);
  EXPECT_EQ(
      request("POST", gw.port(), "/v1/chat/completions", body_with_max_tokens("m", 982)).status,
      400);
  EXPECT_EQ(mock.stats().at("requests").as_int64(), 1);
}

// docs/contract.md: a fallback whose upstream's cap is too small for the request "is refused that
// attempt, `overloaded`, and the chain goes on". "m" fails (503, no retries) on upstream a; its
// first fallback "small" is on b, whose cap of 100 tokens can never hold the request; its second,
// "last", on c, answers. One mock stands behind the three upstreams: its log says which
// deployments the request reached.
TEST(TokenBudgetTest, AFallbackWhoseCapIsTooSmallIsPassedAndTheNextFallbackAnswers) {
  mock_server mock;
  auto upstream = [&](const std::string& name, const std::string& more) {
    return "[[upstreams]]\nname = \"" + name + "\"\nbase_url = \"" + mock.url() + "\"\n" +
           every_surface + "\nmax_in_flight = 8\n" + more + "\n";
  };
  auto deployment = [](const std::string& name, const std::string& on, const std::string& model,
                       const std::string& more = "") {
    return "[[models]]\nname = \"" + name + "\"\nupstream = \"" + on + "\"\nupstream_model = \"" +
           model + "\"\n" + more + "\n";
  };
  gateway_process gw{
      "[server]\nlisten = \"127.0.0.1:0\"\n\n[request]\nmax_retries = 0\n\n" + upstream("a", "") +
      upstream("b", "max_tokens_in_flight = 100") + upstream("c", "") +
      deployment("m", "a", "mock-fail-503", "fallbacks = [\"small\", \"last\"]") +
      deployment("small", "b", "mock-delay-2") + deployment("last", "c", "mock-delay-1") +
      "\n[telemetry]\nlog_format = \"json\"\n"};
  auto r = request("POST", gw.port(), "/v1/chat/completions", body_with_max_tokens("m", 500),
                   {{"x-request-id", "heavy-for-small"}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_NE(r.header("x-tether-outcome"), nullptr);
  EXPECT_EQ(*r.header("x-tether-outcome"), "ok");
  // The upstreams saw m's attempt and last's, never small's.
  const auto seen = entries_of(mock.stats(), "heavy-for-small");
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(str(seen[0].at("model")), "mock-fail-503");
  EXPECT_EQ(str(seen[1].at("model")), "mock-delay-1");
  // The access log lists the attempts that held a slot: small's, refused, is not among them.
  auto line = access_line(gw, "heavy-for-small");
  ASSERT_TRUE(line);
  EXPECT_EQ(str(line->at("outcome")), "ok");
  const auto& attempts = line->at("attempts").as_array();
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(str(attempts[0].at("upstream")), "a");
  EXPECT_EQ(str(attempts[0].at("outcome")), "upstream_failed");
  EXPECT_EQ(str(attempts[1].at("upstream")), "c");
  EXPECT_EQ(str(attempts[1].at("outcome")), "ok");
  // A request light enough for b's cap is served by small, as before.
  auto light = request("POST", gw.port(), "/v1/chat/completions", body_with_max_tokens("m", 10),
                       {{"x-request-id", "light"}});
  ASSERT_EQ(light.status, 200) << light.body;
  const auto light_seen = entries_of(mock.stats(), "light");
  ASSERT_EQ(light_seen.size(), 2u);
  EXPECT_EQ(str(light_seen[1].at("model")), "mock-delay-2");
}

// The weight of a caller who left is freed when the upstream connection closed, not when the
// caller stopped waiting: the next request reaches the upstream only after that close.
TEST(TokenBudgetTest, ALeftCallersWeightReturnsOnlyWhenTheUpstreamSawTheClose) {
  mock_server mock;
  gateway_process gw{
      token_capped(mock, 1000, model_entry("slow", "mock-delay-3000") + model_entry("fast", "mock"),
                   "max_retries = 0\ndeadline_ms = 20000\nattempt_timeout_ms = 20000")};
  auto first = std::async(std::launch::async, [&] {
    return request("POST", gw.port(), "/v1/chat/completions", body_with_max_tokens("slow", 600),
                   {{"x-request-deadline-ms", "400"}});
  });
  mock.wait_for_stats([](const auto& s) { return s.at("active").as_int64() == 1; });
  EXPECT_GT(metric(gw.port(), tokens_gauge), 600);
  auto second = request("POST", gw.port(), "/v1/chat/completions",
                        body_with_max_tokens("fast", 600), {{"x-request-id", "second"}});
  EXPECT_EQ(first.get().status, 504);
  EXPECT_EQ(second.status, 200);
  const auto log = mock_log(mock.stats());
  ASSERT_EQ(log.size(), 2u);
  ASSERT_FALSE(log[0].at("closed_ms").is_null());
  EXPECT_GE(num(log[1].at("started_ms")), num(log[0].at("closed_ms")))
      << "the second request reached the upstream before the first one's connection closed";
  auto line = access_line(gw, "second");
  ASSERT_TRUE(line);
  EXPECT_GT(num(line->at("queue_wait_ms")), 100.0);  // it waited for the weight, not a slot
}

}  // namespace
}  // namespace tether::test
