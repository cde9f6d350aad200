// The access line as an operator's log pipeline reads it: one JSON object, every field present
// (null when unknown), times in ms with three decimals, strings escaped, attempts in order.
#include "actors/access_log.hpp"

#include <boost/json.hpp>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tether {
namespace {

namespace json = boost::json;

access_record sample() {
  access_record r;
  r.request_id = "req-1";
  r.model = "gpt-4o";
  r.path = "/v1/chat/completions";
  r.stream = true;
  r.result = outcome::ok;
  r.status = 200;
  r.deadline_ms = 30000;
  r.queue_wait_ms = 0.0125;
  r.ttfb_ms = 12.3456;
  r.duration_ms = 1500.25;
  return r;
}

json::object parse(const std::string& line) {
  json::error_code ec;
  auto v = json::parse(line, ec);
  EXPECT_FALSE(ec) << line;
  EXPECT_TRUE(v.is_object()) << line;
  return v.is_object() ? v.as_object() : json::object{};
}

TEST(AccessLogTest, EveryFieldIsWrittenWithUnknownTimesAsNull) {
  const auto line = format_access_line(sample());
  const auto o = parse(line);
  EXPECT_EQ(o.at("type"), "access");
  EXPECT_EQ(o.at("request_id"), "req-1");
  EXPECT_EQ(o.at("model"), "gpt-4o");
  EXPECT_EQ(o.at("path"), "/v1/chat/completions");
  EXPECT_EQ(o.at("stream"), true);
  EXPECT_EQ(std::string_view(o.at("outcome").as_string()), to_string(outcome::ok));
  EXPECT_EQ(o.at("status"), 200);
  EXPECT_TRUE(o.at("caller_left_ms").is_null());
  EXPECT_TRUE(o.at("work_ended_ms").is_null());
  EXPECT_TRUE(o.at("cancel_latency_ms").is_null());
  EXPECT_TRUE(o.at("client_retry").is_null());
  EXPECT_TRUE(o.at("client_session").is_null());
  EXPECT_TRUE(o.at("call_try").is_null());
  EXPECT_TRUE(o.at("key").is_null());
  EXPECT_TRUE(o.at("prompt_tokens").is_null());
  EXPECT_TRUE(o.at("completion_tokens").is_null());
  EXPECT_TRUE(o.at("cached_tokens").is_null());
  EXPECT_TRUE(o.at("attempts").as_array().empty());
  EXPECT_EQ(o.at("ts").as_string().size(), 24u);  // 2026-11-30T21:03:18.123Z
  EXPECT_EQ(o.at("ts").as_string().back(), 'Z');
  EXPECT_EQ(o.size(), 23u);
}

TEST(AccessLogTest, TheKeysNameAndTheReportedTokensAreRecorded) {
  auto r = sample();
  r.key = "team-a";
  r.prompt_tokens = 12;
  r.completion_tokens = 0;
  r.cached_tokens = 8;
  const auto o = parse(format_access_line(r));
  EXPECT_EQ(o.at("key"), "team-a");
  EXPECT_EQ(o.at("prompt_tokens"), 12);
  EXPECT_EQ(o.at("completion_tokens"), 0);
  EXPECT_EQ(o.at("cached_tokens"), 8);
}

TEST(AccessLogTest, TheSdksRetryCounterIsRecorded) {
  auto r = sample();
  r.client_retry = 2;
  const auto o = parse(format_access_line(r));
  EXPECT_EQ(o.at("client_retry"), 2);
}

TEST(AccessLogTest, TimesHaveThreeDecimalsAsWritten) {
  const auto line = format_access_line(sample());
  EXPECT_NE(line.find("\"deadline_ms\":30000.000,"), std::string::npos) << line;
  EXPECT_NE(line.find("\"queue_wait_ms\":0.013,"), std::string::npos) << line;
  EXPECT_NE(line.find("\"ttfb_ms\":12.346,"), std::string::npos) << line;
  EXPECT_NE(line.find("\"duration_ms\":1500.250,"), std::string::npos) << line;
}

TEST(AccessLogTest, StringsAreEscaped) {
  auto r = sample();
  r.request_id = "a\"b\\c\nd\x01";
  const std::string model(300, '\x02');  // every character escaped: the most room a string takes
  r.model = model;
  const auto o = parse(format_access_line(r));
  EXPECT_EQ(o.at("request_id"), "a\"b\\c\nd\x01");
  EXPECT_EQ(std::string(o.at("model").as_string()), std::string(300, '\x02'));
}

TEST(AccessLogTest, AttemptsAreListedInOrderWithTheirOwnFields) {
  auto r = sample();
  attempt_record first;
  first.upstream = "primary";
  first.model = "m1";
  first.status = 503;
  first.result = outcome::upstream_rejected;
  first.start_ms = 0.5;
  first.head_ms = 7.5;
  first.end_ms = 10.25;
  first.engine_released_ms = 12.5;
  attempt_record second;
  second.upstream = "fallback \"b\"";
  second.model = "m2";
  second.start_ms = 11;
  const std::vector<attempt_record> records{first, second};
  r.attempts = records;
  const auto o = parse(format_access_line(r));
  const auto& attempts = o.at("attempts").as_array();
  ASSERT_EQ(attempts.size(), 2u);
  const auto& a = attempts[0].as_object();
  EXPECT_EQ(a.at("upstream"), "primary");
  EXPECT_EQ(a.at("model"), "m1");
  EXPECT_EQ(a.at("status"), 503);
  EXPECT_EQ(std::string_view(a.at("outcome").as_string()), to_string(outcome::upstream_rejected));
  EXPECT_DOUBLE_EQ(a.at("start_ms").to_number<double>(), 0.5);
  EXPECT_DOUBLE_EQ(a.at("head_ms").to_number<double>(), 7.5);
  EXPECT_DOUBLE_EQ(a.at("end_ms").to_number<double>(), 10.25);
  EXPECT_DOUBLE_EQ(a.at("engine_released_ms").to_number<double>(), 12.5);
  const auto& b = attempts[1].as_object();
  EXPECT_EQ(b.at("upstream"), "fallback \"b\"");
  EXPECT_TRUE(b.at("status").is_null());
  EXPECT_TRUE(b.at("head_ms").is_null());
  EXPECT_TRUE(b.at("end_ms").is_null());
  EXPECT_TRUE(b.at("engine_released_ms").is_null());
  EXPECT_EQ(a.size(), 8u);
  EXPECT_EQ(b.size(), 8u);
}

TEST(AccessLogTest, ManyAttemptsWithLongNamesStillMakeOneValidLine) {
  auto r = sample();
  std::vector<attempt_record> attempts;
  for (int i = 0; i < 50; ++i) {
    attempt_record a;
    a.upstream = std::string(200, 'u');
    a.model = std::string(100, '\x1f');
    a.status = 500;
    a.start_ms = 1e300;  // far past fixed notation's usual width
    attempts.push_back(a);
  }
  r.attempts = attempts;
  const auto o = parse(format_access_line(r));
  EXPECT_EQ(o.at("attempts").as_array().size(), 50u);
}

}  // namespace
}  // namespace tether
