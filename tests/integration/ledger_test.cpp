// The ledger against the real gateway and tether-mock (contract: "The ledger"): what each key
// used, as the upstream reported it, is in the SQLite file after a clean stop; an interrupted
// stream is recorded as estimated, with its waste; a key past its daily tokens is refused 429
// budget_exhausted while another key is served; a file tether cannot use stops the start with a
// message naming it; a kill -9 loses at most the last flush interval, and a restart goes on.
#include <gtest/gtest.h>

#include <algorithm>
#include <boost/json.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "actors/ledger_store.hpp"
#include "tests/integration/harness.hpp"
#include "tests/support/temp_dir.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

const std::string alice_token = "sk-alice-ledger-test";
const std::string bob_token = "sk-bob-ledger-test";
const std::string ops_token = "sk-ops-ledger-test";

std::string keys_toml(const std::string& alice_more = "") {
  return "\n[[keys]]\nname = \"alice\"\nsha256 = \"" + sha256_hex(alice_token) +
         "\"\nmodels = [\"*\"]\n" + alice_more + "\n[[keys]]\nname = \"bob\"\nsha256 = \"" +
         sha256_hex(bob_token) + "\"\nmodels = [\"*\"]\n";
}

std::string ledger_toml(const std::string& file, int flush_ms = 1000) {
  return "\n[ledger]\npath = \"" + file + "\"\nflush_interval_ms = " + std::to_string(flush_ms) +
         "\n";
}

header_map bearer(const std::string& token) {
  return {{"authorization", "Bearer " + token}};
}

struct reported {
  std::uint64_t requests = 0;
  std::uint64_t prompt = 0;
  std::uint64_t completion = 0;
};

// What the stored rows say per key, over every hour.
std::map<std::string, ledger::usage_totals> stored(const std::string& file) {
  ledger::ledger_store store{file};
  return store.totals_per_key(std::numeric_limits<std::int64_t>::min(),
                              std::numeric_limits<std::int64_t>::max());
}

bool stop_cleanly(gateway_process& gw) {
  gw.process().send_signal(SIGTERM);
  return gw.process().wait_exit(10s) == 0;
}

TEST(LedgerTest, EachKeysUsageIsWhatTheUpstreamReportedAndACleanStopLosesNothing) {
  mock_server mock;
  temp_dir dir;
  const auto file = (dir.path() / "ledger.db").string();
  // A long interval: only the stop's own flush can have written the records.
  gateway_process gw{
      gateway_config(mock, "", model_entry("m", "mock") + keys_toml(), ledger_toml(file, 60000))};
  std::map<std::string, reported> sent;
  for (int i = 0; i < 6; ++i) {
    const auto& [name, token] = i % 3 == 0 ? std::pair{std::string{"bob"}, bob_token}
                                           : std::pair{std::string{"alice"}, alice_token};
    // Prompts of different sizes: the mock's prompt tokens follow the body's size.
    const std::string body = R"({"model":"m","messages":[{"role":"user","content":")" +
                             std::string(static_cast<std::size_t>(10 + 37 * i), 'x') + R"("}]})";
    auto r = request("POST", gw.port(), "/v1/chat/completions", body, bearer(token));
    ASSERT_EQ(r.status, 200) << r.body;
    const auto usage = r.json().as_object().at("usage").as_object();
    auto& s = sent[name];
    ++s.requests;
    s.prompt += static_cast<std::uint64_t>(usage.at("prompt_tokens").as_int64());
    s.completion += static_cast<std::uint64_t>(usage.at("completion_tokens").as_int64());
  }
  ASSERT_TRUE(stop_cleanly(gw));
  const auto rows = stored(file);
  for (const auto& [name, s] : sent) {
    ASSERT_TRUE(rows.contains(name)) << name;
    const auto& t = rows.at(name);
    EXPECT_EQ(t.requests, s.requests) << name;
    EXPECT_EQ(t.estimated_requests, 0u) << name;
    EXPECT_EQ(t.prompt, s.prompt) << name;
    EXPECT_EQ(t.completion, s.completion) << name;
    EXPECT_EQ(t.waste, 0u) << name;
  }
}

TEST(LedgerTest, AStreamTheCallerLeftIsEstimatedFromWhatWasRelayedAndItsWasteCounted) {
  mock_server mock;
  temp_dir dir;
  const auto file = (dir.path() / "ledger.db").string();
  gateway_process gw{gateway_config(
      mock, "", model_entry("slow", "mock-stream-40x50") + keys_toml(), ledger_toml(file, 60000))};
  stream_options opts;
  std::size_t content_events = 0;
  opts.on_piece = [&](const stream_piece&) { return true; };
  opts.close_after = 600ms;
  auto s = stream_request("POST", gw.port(), "/v1/chat/completions", chat_body("slow", true),
                          bearer(alice_token), opts);
  ASSERT_EQ(s.status, 200);
  ASSERT_EQ(s.end, stream_end::stopped);
  for (const auto& data : s.sse_data()) {
    if (data.find("\"content\":\"") != std::string::npos) ++content_events;
  }
  ASSERT_GT(content_events, 0u);
  ASSERT_TRUE(access_line(gw, *s.header("x-request-id")).has_value());
  ASSERT_TRUE(stop_cleanly(gw));
  const auto rows = stored(file);
  ASSERT_TRUE(rows.contains("alice"));
  const auto& t = rows.at("alice");
  EXPECT_EQ(t.requests, 1u);
  EXPECT_EQ(t.estimated_requests, 1u);
  // The gateway may have relayed an event the client had not read when it closed.
  EXPECT_GE(t.completion, content_events);
  EXPECT_LE(t.completion, content_events + 1);
  EXPECT_GT(t.prompt, 0u);
  EXPECT_GT(t.waste, 0u);
}

TEST(LedgerTest, AStreamsUsageIsTheUpstreamsOwnAndOnlyACallerWhoAskedForItSeesIt) {
  mock_server mock;
  temp_dir dir;
  const auto file = (dir.path() / "ledger.db").string();
  gateway_process gw{gateway_config(mock, "", model_entry("five", "mock-stream-5x10") + keys_toml(),
                                    ledger_toml(file, 60000))};
  const auto usage_chunks = [](const stream_result& s) {
    const auto data = s.sse_data();
    return std::count_if(data.begin(), data.end(), [](const std::string& d) {
      return d.find("\"usage\"") != std::string::npos;
    });
  };
  stream_options opts;
  auto plain = stream_request("POST", gw.port(), "/v1/chat/completions", chat_body("five", true),
                              bearer(alice_token), opts);
  ASSERT_EQ(plain.status, 200);
  ASSERT_EQ(plain.end, stream_end::complete);
  EXPECT_EQ(usage_chunks(plain), 0) << plain.body;
  EXPECT_EQ(plain.sse_data().back(), "[DONE]");
  const std::string asking =
      R"({"model":"five","stream":true,"stream_options":{"include_usage":true},)"
      R"("messages":[{"role":"user","content":"hello"}]})";
  auto asked =
      stream_request("POST", gw.port(), "/v1/chat/completions", asking, bearer(alice_token), opts);
  ASSERT_EQ(asked.status, 200);
  EXPECT_EQ(usage_chunks(asked), 1) << asked.body;
  // Both bodies asked the mock for the usage: the one without it was asked on its behalf.
  const auto log = mock_log(mock.stats());
  ASSERT_EQ(log.size(), 2u);
  ASSERT_TRUE(access_line(gw, *plain.header("x-request-id")).has_value());
  ASSERT_TRUE(access_line(gw, *asked.header("x-request-id")).has_value());
  ASSERT_TRUE(stop_cleanly(gw));
  const auto t = stored(file).at("alice");
  EXPECT_EQ(t.requests, 2u);
  EXPECT_EQ(t.estimated_requests, 0u);
  EXPECT_EQ(t.completion, 10u);  // the mock's count: a token per piece
  EXPECT_EQ(t.waste, 0u);
}

// Seconds from now to the next UTC midnight.
std::int64_t seconds_to_midnight() {
  const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  return 86400 - now % 86400;
}

TEST(LedgerTest, AKeyPastItsDailyTokensIsRefusedWithRetryAfterAndAnotherKeyIsServed) {
  mock_server mock;
  temp_dir dir;
  const auto file = (dir.path() / "ledger.db").string();
  gateway_process gw{
      gateway_config(mock, "", model_entry("m", "mock") + keys_toml("max_tokens_per_day = 10\n"),
                     ledger_toml(file))};
  const auto body = chat_body("m");
  auto first = request("POST", gw.port(), "/v1/chat/completions", body, bearer(alice_token));
  ASSERT_EQ(first.status, 200) << first.body;
  // Its usage (more than 10 tokens) settled the day's budget.
  auto refused = request("POST", gw.port(), "/v1/chat/completions", body, bearer(alice_token));
  ASSERT_EQ(refused.status, 429) << refused.body;
  const auto error = refused.json().as_object().at("error").as_object();
  EXPECT_EQ(str(error.at("code")), "budget_exhausted");
  EXPECT_NE(str(error.at("message")).find("max_tokens_per_day"), std::string::npos);
  ASSERT_NE(refused.header("retry-after"), nullptr);
  const auto retry_after = std::stoll(*refused.header("retry-after"));
  EXPECT_NEAR(static_cast<double>(retry_after), static_cast<double>(seconds_to_midnight()), 3.0);
  ASSERT_NE(refused.header("x-should-retry"), nullptr);
  EXPECT_EQ(*refused.header("x-should-retry"), "false");
  // Refused at admission: the upstream never saw it.
  EXPECT_EQ(mock_log(mock.stats()).size(), 1u);
  auto other = request("POST", gw.port(), "/v1/chat/completions", body, bearer(bob_token));
  EXPECT_EQ(other.status, 200) << other.body;
  auto line = access_line(gw, *refused.header("x-request-id"));
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(str(line->at("outcome")), "budget_exhausted");
}

TEST(LedgerTest, AFileThatIsNotALedgerStopsTheStartWithAMessageNamingIt) {
  mock_server mock;
  temp_dir dir;
  const auto file = (dir.path() / "ledger.db").string();
  {
    std::ofstream garbage{file, std::ios::binary};
    garbage << std::string(8192, '\x7f');
  }
  temp_dir cfg_dir;
  const auto cfg = (cfg_dir.path() / "tether.toml").string();
  {
    std::ofstream out{cfg};
    out << gateway_config(mock, "", model_entry("m", "mock"), ledger_toml(file));
  }
  child_process p{TETHER_BINARY, {"--config", cfg}};
  const auto code = p.wait_exit(10s);
  ASSERT_TRUE(code.has_value()) << "tether did not stop";
  EXPECT_EQ(*code, 1);
  EXPECT_NE(p.output().find(file), std::string::npos) << p.output();
  // Not overwritten: the operator's file is theirs to look at.
  std::ifstream in{file, std::ios::binary};
  std::string first(16, '\0');
  in.read(first.data(), 16);
  EXPECT_EQ(first, std::string(16, '\x7f'));
}

TEST(LedgerTest, AKillLosesAtMostTheLastFlushIntervalAndARestartGoesOnFromTheFile) {
  mock_server mock;
  temp_dir dir;
  const auto file = (dir.path() / "ledger.db").string();
  constexpr int flush_ms = 200;
  const auto toml =
      gateway_config(mock, "", model_entry("m", "mock") + keys_toml(), ledger_toml(file, flush_ms));
  std::vector<std::chrono::steady_clock::time_point> answered;
  std::chrono::steady_clock::time_point killed;
  {
    gateway_process gw{toml};
    http_connection c{gw.port()};
    const auto until = std::chrono::steady_clock::now() + 1500ms;
    while (std::chrono::steady_clock::now() < until) {
      auto r = c.request("POST", "/v1/chat/completions", chat_body("m"), bearer(alice_token));
      ASSERT_EQ(r.status, 200);
      answered.push_back(std::chrono::steady_clock::now());
    }
    killed = std::chrono::steady_clock::now();
    gw.process().send_signal(SIGKILL);
    ASSERT_TRUE(gw.process().wait_exit(5s).has_value());
  }
  const auto rows = stored(file);
  ASSERT_TRUE(rows.contains("alice"));
  const auto kept = rows.at("alice").requests;
  // Every request answered more than one interval (and a scheduling margin) before the kill was
  // written; nothing was written twice.
  const auto margin = std::chrono::milliseconds(flush_ms) + (TETHER_SANITIZED ? 400ms : 200ms);
  const auto surely = static_cast<std::uint64_t>(std::count_if(
      answered.begin(), answered.end(), [&](const auto& t) { return t < killed - margin; }));
  EXPECT_GE(kept, surely);
  EXPECT_LE(kept, answered.size());
  std::printf("ledger kill -9: %zu answered, %llu stored, %zu lost (flush interval %d ms)\n",
              answered.size(), static_cast<unsigned long long>(kept), answered.size() - kept,
              flush_ms);
  // A restart on the same file goes on from it.
  gateway_process again{toml};
  auto r =
      request("POST", again.port(), "/v1/chat/completions", chat_body("m"), bearer(alice_token));
  ASSERT_EQ(r.status, 200);
  ASSERT_TRUE(stop_cleanly(again));
  EXPECT_EQ(stored(file).at("alice").requests, kept + 1);
}

TEST(LedgerTest, UsageIsAnAdminsToReadAndCountsEveryRequestSoFar) {
  mock_server mock;
  temp_dir dir;
  const auto file = (dir.path() / "ledger.db").string();
  const auto ops = "\n[[keys]]\nname = \"ops\"\nsha256 = \"" + sha256_hex(ops_token) +
                   "\"\nmodels = [\"*\"]\nadmin = true\n";
  // A long interval: the query's own flush makes the records readable.
  gateway_process gw{gateway_config(mock, "", model_entry("m", "mock") + keys_toml() + ops,
                                    ledger_toml(file, 60000))};
  std::uint64_t prompt = 0;
  for (int i = 0; i < 3; ++i) {
    auto r =
        request("POST", gw.port(), "/v1/chat/completions", chat_body("m"), bearer(alice_token));
    ASSERT_EQ(r.status, 200);
    prompt += static_cast<std::uint64_t>(
        r.json().as_object().at("usage").as_object().at("prompt_tokens").as_int64());
  }
  EXPECT_EQ(request("GET", gw.port(), "/v1/usage").status, 401);
  auto not_admin = request("GET", gw.port(), "/v1/usage", {}, bearer(alice_token));
  EXPECT_EQ(not_admin.status, 403);
  EXPECT_EQ(str(not_admin.json().as_object().at("error").as_object().at("code")), "forbidden");
  auto bad = request("GET", gw.port(), "/v1/usage?group_by=week", {}, bearer(ops_token));
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(str(bad.json().as_object().at("error").as_object().at("message")).find("group_by"),
            std::string::npos);
  auto r = request("GET", gw.port(), "/v1/usage?key=alice&group_by=model", {}, bearer(ops_token));
  ASSERT_EQ(r.status, 200) << r.body;
  const auto body = r.json();
  const auto& data = body.as_object().at("data").as_array();
  ASSERT_EQ(data.size(), 1u) << r.body;
  const auto& row = data[0].as_object();
  EXPECT_EQ(str(row.at("key")), "alice");
  EXPECT_EQ(str(row.at("model")), "m");
  EXPECT_EQ(row.at("requests").as_int64(), 3);
  EXPECT_EQ(static_cast<std::uint64_t>(row.at("prompt_tokens").as_int64()), prompt);
}

}  // namespace
}  // namespace tether::test
