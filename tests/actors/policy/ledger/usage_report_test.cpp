#include "actors/policy/ledger/usage_report.hpp"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <limits>

namespace tether::ledger {
namespace {

// Unix times from Python's calendar.timegm.
constexpr std::int64_t dec_8_2026 = 1796688000;         // 00:00 UTC
constexpr std::int64_t dec_8_2026_13h = 1796734800;     // 13:00 UTC
constexpr std::int64_t dec_8_2026_130509 = 1796735109;  // 13:05:09 UTC
constexpr std::int64_t feb_29_2024 = 1709164800;
constexpr std::int64_t last_second_of_9999 = 253402300799;

usage_query parsed(std::string_view query_string) {
  auto result = parse_usage_query(query_string);
  if (const auto* error = std::get_if<std::string>(&result)) {
    ADD_FAILURE() << query_string << ": " << *error;
    return {};
  }
  return std::get<usage_query>(result);
}

std::string error_of(std::string_view query_string) {
  auto result = parse_usage_query(query_string);
  if (const auto* error = std::get_if<std::string>(&result)) return *error;
  ADD_FAILURE() << query_string << " was accepted";
  return {};
}

TEST(UsageReportTest, AnEmptyQueryAsksForEverythingPerDay) {
  EXPECT_EQ(parsed(""), usage_query{});
  EXPECT_EQ(parsed("&"), usage_query{});
  EXPECT_EQ(parsed("").by, group_by::day);
}

TEST(UsageReportTest, EveryParameterIsRead) {
  const auto q = parsed("key=alice&model=llama-3&from=2026-12-08&to=2026-12-09&group_by=hour");
  EXPECT_EQ(q, (usage_query{.key = "alice",
                            .model = "llama-3",
                            .from = dec_8_2026,
                            .to = dec_8_2026 + 86400,
                            .by = group_by::hour}));
  EXPECT_EQ(parsed("group_by=model").by, group_by::model);
  EXPECT_EQ(parsed("group_by=day").by, group_by::day);
  // Empty names are names: the keyless gateway's rows are under the empty key.
  EXPECT_EQ(parsed("key=").key, std::optional<std::string>(""));
}

TEST(UsageReportTest, TimesAreADateADateTimeOrUnixSeconds) {
  EXPECT_EQ(parse_usage_time("2026-12-08"), dec_8_2026);
  EXPECT_EQ(parse_usage_time("2026-12-08T13:00:00Z"), dec_8_2026_13h);
  EXPECT_EQ(parse_usage_time("2026-12-08T13:05:09Z"), dec_8_2026_130509);
  EXPECT_EQ(parse_usage_time("1796734800"), dec_8_2026_13h);
  EXPECT_EQ(parse_usage_time("0"), 0);
  EXPECT_EQ(parse_usage_time("2024-02-29"), feb_29_2024);
  EXPECT_EQ(parse_usage_time("9999-12-31T23:59:59Z"), last_second_of_9999);
  // `to` a date: the start of that day, so the day itself is not in the range.
  const auto q = parsed("from=2026-12-07&to=2026-12-08");
  EXPECT_EQ(q.to, dec_8_2026);
  EXPECT_EQ(q.from, dec_8_2026 - 86400);
}

TEST(UsageReportTest, WhatIsNotATimeIsRefused) {
  for (const std::string_view bad : {"",
                                     "2026-12-8",
                                     "2026-13-01",
                                     "2026-02-29",
                                     "2025-11-31",
                                     "2026-12-08T24:00:00Z",
                                     "2026-12-08T13:60:00Z",
                                     "2026-12-08T13:00:60Z",
                                     "2026-12-08T13:00:00",
                                     "2026-12-08 13:00:00Z",
                                     "2026-12-08t13:00:00z",
                                     "-1",
                                     "+5",
                                     "1e9",
                                     " 5",
                                     "5 ",
                                     "1969-12-31",
                                     "253402300800",
                                     "9999999999999",
                                     "2026/12/08",
                                     "２０２６-12-08",
                                     "yesterday"}) {
    EXPECT_EQ(parse_usage_time(bad), std::nullopt) << bad;
  }
  const auto error = error_of("from=2026-12-32");
  EXPECT_NE(error.find("'from'"), std::string::npos) << error;
  EXPECT_NE(error.find("not a time"), std::string::npos) << error;
  EXPECT_EQ(error.find("2026-12-32"), std::string::npos) << error;
  EXPECT_NE(error_of("to=soon").find("'to'"), std::string::npos);
}

TEST(UsageReportTest, ValuesArePercentDecodedAndAPlusIsASpace) {
  const auto q = parsed("key=a%26b%3Dc%25%2B+d%00%C3%A9&model=%2Fm%3Fx");
  EXPECT_EQ(q.key, std::optional<std::string>(std::string("a&b=c%+ d\0\xc3\xa9", 12)));
  EXPECT_EQ(q.model, std::optional<std::string>("/m?x"));
  EXPECT_EQ(parsed("%6Bey=x").key, std::optional<std::string>("x"));  // the name too
  EXPECT_EQ(parsed("from=2026-12-08T13%3A00%3A00Z").from, dec_8_2026_13h);
  for (const std::string_view bad : {"key=%", "key=%4", "key=%zz", "key=a%g1", "%k=1"}) {
    EXPECT_NE(error_of(bad).find("percent-encoding"), std::string::npos) << bad;
  }
}

TEST(UsageReportTest, UnknownRepeatedOrValuelessParametersAreRefusedNotIgnored) {
  auto error = error_of("key=alice&modle=m");
  EXPECT_NE(error.find("unknown parameter 'modle'"), std::string::npos) << error;
  error = error_of("Key=alice");
  EXPECT_NE(error.find("unknown parameter 'Key'"), std::string::npos) << error;
  // A name that is not a plain word is not written back.
  error = error_of("%1B%5B2J=1");
  EXPECT_NE(error.find("unknown parameter (not a plain name)"), std::string::npos) << error;
  EXPECT_EQ(error.find('\x1b'), std::string::npos) << error;

  error = error_of("key=alice&key=bob");
  EXPECT_NE(error.find("'key' is given more than once"), std::string::npos) << error;
  error = error_of("group_by=day&from=1&group_by=hour");
  EXPECT_NE(error.find("'group_by' is given more than once"), std::string::npos) << error;
  error = error_of("key");
  EXPECT_NE(error.find("'key' has no value"), std::string::npos) << error;

  error = error_of("group_by=week");
  EXPECT_NE(error.find("'group_by' must be hour, day or model"), std::string::npos) << error;
}

TEST(UsageReportTest, ARangeThatSelectsNothingIsRefused) {
  EXPECT_NE(error_of("from=2026-12-08&to=2026-12-08").find("'from' must be before 'to'"),
            std::string::npos);
  EXPECT_NE(error_of("from=2026-12-09&to=2026-12-08").find("before"), std::string::npos);
  EXPECT_EQ(parsed("from=2026-12-08&to=2026-12-08T01:00:00Z").to, dec_8_2026 + 3600);
}

TEST(UsageReportTest, SpendIsPrintedFromTheIntegerExactly) {
  EXPECT_EQ(nanousd_decimal(0), "0");
  EXPECT_EQ(nanousd_decimal(1), "0.000000001");
  EXPECT_EQ(nanousd_decimal(1234567), "0.001234567");
  EXPECT_EQ(nanousd_decimal(1'000'000'000), "1");
  EXPECT_EQ(nanousd_decimal(2'500'000'000), "2.5");
  EXPECT_EQ(nanousd_decimal(100'000'000'010), "100.00000001");
  // Beyond a double's 53 bits: every digit kept.
  EXPECT_EQ(nanousd_decimal(std::numeric_limits<std::uint64_t>::max()), "18446744073.709551615");
  EXPECT_EQ(nanousd_decimal(9'007'199'254'740'993), "9007199.254740993");
}

TEST(UsageReportTest, UtcDateTimes) {
  EXPECT_EQ(utc_date_time(dec_8_2026_130509), "2026-12-08T13:05:09Z");
  EXPECT_EQ(utc_date_time(0), "1970-01-01T00:00:00Z");
  EXPECT_EQ(utc_date_time(feb_29_2024 + 86399), "2024-02-29T23:59:59Z");
  EXPECT_EQ(utc_date_time(last_second_of_9999), "9999-12-31T23:59:59Z");
}

std::vector<usage_row> sample_rows() {
  return {
      usage_row{dec_8_2026, "alice", "llama-3",
                usage_totals{.requests = 3,
                             .estimated_requests = 1,
                             .prompt = 300,
                             .completion = 30,
                             .cached = 100,
                             .waste = 7,
                             .spend_nanousd = 1234567}},
      usage_row{
          dec_8_2026 + 86400, "bob \"the\" builder", "m",
          usage_totals{
              .requests = 12000, .prompt = 40, .completion = 4, .spend_nanousd = 2'000'000'000}}};
}

TEST(UsageReportTest, TheJsonBodyHasEveryFieldAndTheExactSpend) {
  const usage_query q{.from = dec_8_2026, .to = dec_8_2026 + 2 * 86400, .by = group_by::day};
  const auto body = usage_json(q, sample_rows());
  EXPECT_EQ(body,
            R"({"object":"list","group_by":"day","from":"2026-12-08T00:00:00Z",)"
            R"("to":"2026-12-10T00:00:00Z","data":[)"
            R"({"start":"2026-12-08T00:00:00Z","key":"alice","model":"llama-3","requests":3,)"
            R"("estimated_requests":1,"prompt_tokens":300,"completion_tokens":30,)"
            R"("cached_tokens":100,"waste_tokens":7,"spend_usd":0.001234567},)"
            R"({"start":"2026-12-09T00:00:00Z","key":"bob \"the\" builder","model":"m",)"
            R"("requests":12000,"estimated_requests":0,"prompt_tokens":40,"completion_tokens":4,)"
            R"("cached_tokens":0,"waste_tokens":0,"spend_usd":2}]})");
  // It is JSON, and what a client reads back is the rows.
  const auto doc = boost::json::parse(body).as_object();
  EXPECT_EQ(doc.at("data").as_array().size(), 2u);
  EXPECT_EQ(doc.at("data").as_array()[1].at("key").as_string(), "bob \"the\" builder");

  // Open bounds are null; an empty answer is an empty list.
  EXPECT_EQ(usage_json(usage_query{.by = group_by::model}, {}),
            R"({"object":"list","group_by":"model","from":null,"to":null,"data":[]})");
  // Names with control bytes and non-ASCII stay valid JSON and read back the same.
  const std::vector<usage_row> odd{
      usage_row{dec_8_2026, std::string("k\n\t\x01\\\xc3\xa9", 7), "m", usage_totals{}}};
  const auto odd_doc = boost::json::parse(usage_json(usage_query{}, odd)).as_object();
  EXPECT_EQ(odd_doc.at("data").as_array()[0].at("key").as_string(),
            std::string_view("k\n\t\x01\\\xc3\xa9", 7));
}

TEST(UsageReportTest, TheTableHasAHeaderAlignedColumnsAndATotal) {
  const usage_query q{.by = group_by::day};
  EXPECT_EQ(usage_table(q, sample_rows()),
            "day         key                model    requests  estimated  prompt  completion  "
            "cached  waste    spend_usd\n"
            "2026-12-08  alice              llama-3         3          1     300          30  "
            "   100      7  0.001234567\n"
            "2026-12-09  bob \"the\" builder  m           12000          0      40           4  "
            "     0      0  2.000000000\n"
            "total                                      12003          1     340          34  "
            "   100      7  2.001234567\n");
}

TEST(UsageReportTest, TheTableShowsHoursAndTheFirstHourPerModelAndNoControlBytes) {
  std::vector<usage_row> rows{usage_row{dec_8_2026_13h, std::string("\x1b[2Jé", 6), "",
                                        usage_totals{.requests = 1, .prompt = 5}}};
  EXPECT_EQ(usage_table(usage_query{.by = group_by::hour}, rows),
            "hour              key    model  requests  estimated  prompt  completion  cached  "
            "waste    spend_usd\n"
            "2026-12-08 13:00  ?[2Jé  -             1          0       5           0       0  "
            "    0  0.000000000\n"
            "total                                  1          0       5           0       0  "
            "    0  0.000000000\n");
  const auto by_model = usage_table(usage_query{.by = group_by::model}, rows);
  EXPECT_EQ(by_model.substr(0, by_model.find('\n')),
            "since             key    model  requests  estimated  prompt  completion  cached  "
            "waste    spend_usd");
  // Nothing stored: the header and a zero total.
  EXPECT_EQ(usage_table(usage_query{}, {}),
            "day    key  model  requests  estimated  prompt  completion  cached  waste    "
            "spend_usd\n"
            "total                     0          0       0           0       0      0  "
            "0.000000000\n");
}

}  // namespace
}  // namespace tether::ledger
