// Gateway keys (issue #8): bearer tokens matched by SHA-256 digest, a per-key model allow-list
// and a per-key cap. A request over its key's cap is QUEUED like any other cap (the budget
// actor holds it until one of the key's slots frees), never refused with 429.
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <vector>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

const std::string token_a = "tok-team-a-0123456789";
const std::string token_b = "tok-team-b-9876543210";

std::string key_entry(const std::string& name, const std::string& token, const std::string& models,
                      int max_in_flight = 0) {
  return "[[keys]]\nname = \"" + name + "\"\nsha256 = \"" + sha256_hex(token) +
         "\"\nmodels = " + models + "\nmax_in_flight = " + std::to_string(max_in_flight) + "\n\n";
}

std::string keys_section() {
  return key_entry("team-a", token_a, R"(["*"])", 1) +
         key_entry("team-b", token_b, R"(["chat", "slow"])");
}

header_map bearer(const std::string& token, const std::string& request_id = "") {
  header_map h{{"authorization", "Bearer " + token}};
  if (!request_id.empty()) h.emplace_back("x-request-id", request_id);
  return h;
}

std::string error_code_of(const http_response& r) {
  return str(r.json().at("error").at("code"));
}

// The error body with its request id blanked, to compare two refusals.
std::string without_request_id(const http_response& r) {
  auto body = r.json().as_object();
  body["error"].as_object()["request_id"] = "";
  return boost::json::serialize(body);
}

class KeysTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string models = model_entry("chat", "mock") + model_entry("slow", "mock-delay-600") +
                         model_entry("other", "mock");
    auto cfg = gateway_config(mock_, "deadline_ms = 10000\nattempt_timeout_ms = 5000", models,
                              keys_section());
    // Debug logging: a key must not leak at any level.
    cfg.replace(cfg.find("log_format = \"json\"\n"), std::string("log_format = \"json\"\n").size(),
                "log_format = \"json\"\nlog_level = \"debug\"\n");
    gw_ = std::make_unique<gateway_process>(cfg);
  }

  http_response post(const std::string& model, const header_map& headers) {
    return request("POST", gw_->port(), "/v1/chat/completions", chat_body(model), headers);
  }

  void expect_served_with_right_key() {
    auto ok = post("chat", bearer(token_a));
    EXPECT_EQ(ok.status, 200) << ok.body;
  }

  mock_server mock_;
  std::unique_ptr<gateway_process> gw_;
};

TEST_F(KeysTest, NoKeyIs401UnauthorizedAndReachesNoUpstream) {
  auto r = post("chat", {});
  ASSERT_EQ(r.status, 401) << r.body;
  EXPECT_EQ(error_code_of(r), "unauthorized");
  EXPECT_EQ(mock_.stats().at("requests").as_int64(), 0);
  auto models = request("GET", gw_->port(), "/v1/models");
  EXPECT_EQ(models.status, 401);
  expect_served_with_right_key();
}

TEST_F(KeysTest, WrongKeyIs401IndistinguishableFromNoKeyAndNamesNoKey) {
  auto none = post("chat", {});
  for (const auto& auth : std::vector<std::string>{
           "Bearer wrong", "Bearer " + token_a + "x", "Bearer " + token_a.substr(0, 5),
           "Bearer " + sha256_hex(token_a), "Basic " + token_a, "Bearer ", token_a}) {
    auto r = post("chat", {{"authorization", auth}});
    ASSERT_EQ(r.status, 401) << auth;
    EXPECT_EQ(error_code_of(r), "unauthorized");
    // Same answer as no key at all: nothing tells a prober how close it came.
    EXPECT_EQ(without_request_id(r), without_request_id(none)) << auth;
    EXPECT_EQ(r.body.find("team-"), std::string::npos) << r.body;
  }
  EXPECT_EQ(mock_.stats().at("requests").as_int64(), 0);
  expect_served_with_right_key();
}

TEST_F(KeysTest, RightKeyForAModelOutsideItsAllowListIs403Forbidden) {
  auto r = post("other", bearer(token_b));
  ASSERT_EQ(r.status, 403) << r.body;
  EXPECT_EQ(error_code_of(r), "forbidden");
  EXPECT_EQ(r.body.find("team-b"), std::string::npos);
  EXPECT_EQ(mock_.stats().at("requests").as_int64(), 0);
  // The same key on an allowed model, and a wildcard key on that model, are served.
  EXPECT_EQ(post("chat", bearer(token_b)).status, 200);
  EXPECT_EQ(post("other", bearer(token_a)).status, 200);
}

TEST_F(KeysTest, RequestOverItsKeysCapIsQueuedUntilTheKeysSlotFreesWhileOtherKeysGoOn) {
  // team-a may hold one slot. a1 holds it; a2 waits in the queue; b1 (another key) goes past.
  auto a1 = std::async(std::launch::async, [&] { return post("slow", bearer(token_a, "a1")); });
  auto busy = mock_.wait_for_stats([](const auto& s) { return s.at("active").as_int64() == 1; });
  ASSERT_EQ(busy.at("active").as_int64(), 1);
  auto a2 = std::async(std::launch::async, [&] { return post("slow", bearer(token_a, "a2")); });
  // No event tells the test that a2 is queued but the gauge: bounded polling.
  double depth = -1;
  for (int i = 0; i < 200 && depth != 1; ++i) {
    depth = metric(gw_->port(), "tether_queue_depth");
    if (depth != 1) std::this_thread::sleep_for(5ms);
  }
  ASSERT_EQ(depth, 1) << "a2 is not queued";
  auto b1 = std::async(std::launch::async, [&] { return post("slow", bearer(token_b, "b1")); });
  auto both = mock_.wait_for_stats([](const auto& s) { return s.at("requests").as_int64() >= 2; });
  // While a1 works, only a1 and b1 have reached the upstream.
  ASSERT_EQ(both.at("requests").as_int64(), 2);
  EXPECT_EQ(both.at("active").as_int64(), 2);

  auto r1 = a1.get(), r2 = a2.get(), r3 = b1.get();
  EXPECT_EQ(r1.status, 200);
  EXPECT_EQ(r2.status, 200) << "queued, not refused: " << r2.body;
  EXPECT_EQ(r3.status, 200);

  auto log = mock_log(mock_.stats());
  ASSERT_EQ(log.size(), 3u);
  // a2 reached the upstream only after a1's connection work ended.
  const auto& first = log[0];
  const auto& last = log[2];
  ASSERT_FALSE(first.at("ended_ms").is_null());
  EXPECT_GE(num(last.at("started_ms")), num(first.at("ended_ms")) - 1.0);
  auto line = access_line(*gw_, "a2");
  ASSERT_TRUE(line);
  EXPECT_EQ(str(line->at("outcome")), "ok");
  EXPECT_GT(num(line->at("queue_wait_ms")), 300.0);
  auto b_line = access_line(*gw_, "b1");
  ASSERT_TRUE(b_line);
  EXPECT_LT(num(b_line->at("queue_wait_ms")), 300.0);
}

// Over HTTP a 64-byte compare's timing is far below the noise, so this cannot prove constant
// time; what it pins down is that matching is by digest (no prefix or length of the token
// matters) and that a near miss of the stored digest is answered no faster or slower than a far
// one — a compare that stopped at the first difference would be the first suspect if it were.
TEST_F(KeysTest, NearMissAndFarMissTokensAreRefusedAlikeWhateverTheirDigestPrefix) {
  const auto target = sha256_hex(token_a);
  // A token whose digest shares the first 4 hex digits with team-a's (about 65k hashes).
  std::string near;
  for (std::uint64_t i = 0;; ++i) {
    auto candidate = "near-" + std::to_string(i);
    if (sha256_hex(candidate).compare(0, 4, target, 0, 4) == 0) {
      near = candidate;
      break;
    }
  }
  std::string far;
  for (std::uint64_t i = 0;; ++i) {
    auto candidate = "far-" + std::to_string(i);
    if (sha256_hex(candidate)[0] != target[0]) {
      far = candidate;
      break;
    }
  }
  http_connection conn{gw_->port()};
  std::vector<double> near_ms, far_ms;
  for (int i = 0; i < 60; ++i) {
    for (auto* token : {&near, &far}) {
      auto r = conn.request("POST", "/v1/chat/completions", chat_body("chat"), bearer(*token));
      ASSERT_EQ(r.status, 401);
      (token == &near ? near_ms : far_ms).push_back(r.elapsed.count());
    }
  }
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  const double n = median(near_ms), f = median(far_ms);
  // Generous: a loaded 2-core CI machine; the point is that they are the same order.
  EXPECT_LT(n, f * 3 + 1.0) << "near " << n << " ms, far " << f << " ms";
  EXPECT_LT(f, n * 3 + 1.0) << "near " << n << " ms, far " << f << " ms";
  expect_served_with_right_key();
}

TEST_F(KeysTest, KeysAndAuthorizationHeadersNeverAppearInTheLogAtDebugLevel) {
  ASSERT_EQ(post("chat", bearer(token_a, "logged-1")).status, 200);
  ASSERT_EQ(post("chat", bearer("Bearer-wrong-secret-token")).status, 401);
  ASSERT_EQ(post("other", bearer(token_b)).status, 403);
  ASSERT_TRUE(access_line(*gw_, "logged-1"));
  auto out = gw_->process().output();
  for (const auto& secret : {token_a, token_b, std::string("wrong-secret-token"),
                             sha256_hex(token_a), sha256_hex(token_b)}) {
    EXPECT_EQ(out.find(secret), std::string::npos) << secret;
  }
  // The caller's token is not forwarded upstream either (this upstream has no key of its own).
  auto seen = mock_log(mock_.stats());
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].at("headers").as_object().if_contains("authorization"), nullptr);
}

// The Anthropic SDK sends x-api-key, the OpenAI SDK a Bearer token, and a client configured for
// both sends both: the Bearer token decides, whatever x-api-key says.
TEST_F(KeysTest, WithBothAuthorizationAndXApiKeyTheBearerTokenDecides) {
  // team-b may not use "other", team-a may: the answer says whose key was taken.
  auto b_wins = post("other", {{"authorization", "Bearer " + token_b}, {"x-api-key", token_a}});
  EXPECT_EQ(b_wins.status, 403) << b_wins.body;
  auto a_wins = post("other", {{"authorization", "Bearer " + token_a},
                               {"x-api-key", token_b},
                               {"x-request-id", "both-sent"}});
  EXPECT_EQ(a_wins.status, 200) << a_wins.body;
  auto line = access_line(*gw_, "both-sent");
  ASSERT_TRUE(line);
  EXPECT_EQ(str(line->at("key")), "team-a");
  // A wrong Bearer token, or an Authorization of another scheme, is a wrong key even beside a
  // good x-api-key.
  for (const auto& auth : std::vector<std::string>{"Bearer wrong", "Basic " + token_a}) {
    auto r = post("chat", {{"authorization", auth}, {"x-api-key", token_a}});
    EXPECT_EQ(r.status, 401) << auth << ": " << r.body;
  }
  // Only the one request that was let through reached the upstream, with neither caller header.
  auto seen = mock_log(mock_.stats());
  ASSERT_EQ(seen.size(), 1u);
  const auto& h = seen[0].at("headers").as_object();
  EXPECT_EQ(h.if_contains("authorization"), nullptr);
  EXPECT_EQ(h.if_contains("x-api-key"), nullptr);
}

TEST(KeysUpstreamTest, EachUpstreamGetsOnlyItsOwnKeyAndNeverTheCallers) {
  mock_server mock_a;
  mock_server mock_b;
  auto cfg = gateway_config(mock_a, "max_retries = 0",
                            model_entry("on-a", "mock") +
                                "[[models]]\nname = \"on-b\"\nupstream = \"b\"\n"
                                "upstream_model = \"mock\"\n",
                            "[[upstreams]]\nname = \"b\"\nbase_url = \"" + mock_b.url() +
                                "\"\napi_key_env = \"TETHER_TEST_KEY_B\"\n\n" +
                                key_entry("team-a", token_a, R"(["*"])"));
  cfg.insert(cfg.find("max_in_flight = 64"), "api_key_env = \"TETHER_TEST_KEY_A\"\n");
  gateway_process gw{
      cfg, {{"TETHER_TEST_KEY_A", "sk-only-for-a"}, {"TETHER_TEST_KEY_B", "sk-only-for-b"}}};
  for (const auto* model : {"on-a", "on-b", "on-a", "on-b"}) {
    auto r = request("POST", gw.port(), "/v1/chat/completions", chat_body(model), bearer(token_a));
    ASSERT_EQ(r.status, 200) << model << ": " << r.body;
  }
  for (auto [mock, key] :
       {std::pair{&mock_a, "Bearer sk-only-for-a"}, std::pair{&mock_b, "Bearer sk-only-for-b"}}) {
    auto seen = mock_log(mock->stats());
    ASSERT_EQ(seen.size(), 2u);
    for (const auto& e : seen) EXPECT_EQ(str(e.at("headers").at("authorization")), key);
  }
  auto out = gw.process().output();
  EXPECT_EQ(out.find("sk-only-for"), std::string::npos);
  EXPECT_EQ(out.find(token_a), std::string::npos);
}

}  // namespace
}  // namespace tether::test
