#include "actors/policy/request/trace_context.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace tether {
namespace {

// The example of the W3C Trace Context recommendation, §3.2.
constexpr const char* spec_example = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

bool is_lower_hex_of_size(const std::string& s, std::size_t size) {
  return s.size() == size && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

TEST(TraceContextTest, SpecExampleIsParsedIntoItsFields) {
  auto context = parse_traceparent(spec_example);
  ASSERT_TRUE(context.has_value());
  EXPECT_EQ(context->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(context->span_id, "00f067aa0ba902b7");
  EXPECT_EQ(context->flags, 1);
}

TEST(TraceContextTest, ParsedHeaderFormatsBackUnchanged) {
  for (const char* header :
       {spec_example, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff"}) {
    auto context = parse_traceparent(header);
    ASSERT_TRUE(context.has_value()) << header;
    EXPECT_EQ(format_traceparent(*context), header);
  }
}

TEST(TraceContextTest, UnsampledFlagsAreKept) {
  auto context = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  ASSERT_TRUE(context.has_value());
  EXPECT_EQ(context->flags, 0);
}

TEST(TraceContextTest, MalformedVersion00HeadersAreRejected) {
  const std::string bad[] = {
      "",
      "00",
      // upper case anywhere
      "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A",
      // all-zero ids
      "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
      // wrong lengths
      "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e47366-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b77-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-011",
      // version 00 allows nothing after the flags
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what",
      // wrong separators, non-hex, surrounding blanks
      "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7_01",
      "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
      " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 ",
      // a version that is not two lower-case hex digits, and the forbidden version ff
      "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      "0A-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
  };
  for (const auto& header : bad) {
    EXPECT_FALSE(parse_traceparent(header).has_value()) << "'" << header << "'";
  }
}

TEST(TraceContextTest, FutureVersionIsParsedByItsVersion00Prefix) {
  auto exact = parse_traceparent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  ASSERT_TRUE(exact.has_value());
  EXPECT_EQ(exact->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(exact->span_id, "00f067aa0ba902b7");

  auto extended =
      parse_traceparent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra-fields");
  ASSERT_TRUE(extended.has_value());
  EXPECT_EQ(extended->span_id, "00f067aa0ba902b7");
  // The joined trace is re-sent as the version this gateway speaks.
  EXPECT_EQ(format_traceparent(*extended), spec_example);
}

TEST(TraceContextTest, FutureVersionKeepsOnlyTheSampledFlag) {
  auto context = parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-fe");
  ASSERT_TRUE(context.has_value());
  EXPECT_EQ(context->flags, 0);
  context = parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03");
  ASSERT_TRUE(context.has_value());
  EXPECT_EQ(context->flags, 1);
}

TEST(TraceContextTest, FutureVersionWithoutDashAfterFlagsIsRejected) {
  EXPECT_FALSE(
      parse_traceparent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x").has_value());
  EXPECT_FALSE(
      parse_traceparent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0").has_value());
}

TEST(TraceContextTest, NewIdsAreLowerHexOfTheRightSizeAndUnique) {
  std::set<std::string> trace_ids;
  std::set<std::string> span_ids;
  for (int i = 0; i < 1000; ++i) {
    auto trace_id = new_trace_id();
    auto span_id = new_span_id();
    EXPECT_TRUE(is_lower_hex_of_size(trace_id, 32)) << trace_id;
    EXPECT_TRUE(is_lower_hex_of_size(span_id, 16)) << span_id;
    trace_ids.insert(trace_id);
    span_ids.insert(span_id);
  }
  EXPECT_EQ(trace_ids.size(), 1000u);
  EXPECT_EQ(span_ids.size(), 1000u);
}

// Every digit of an id is random: each position takes each of the 16 digits (a digit table
// written wrong, or a draw's bits reused, leaves some digit out of some position).
TEST(TraceContextTest, EveryPositionOfANewIdTakesEveryHexDigit) {
  std::vector<std::set<char>> trace_digits(32);
  std::vector<std::set<char>> span_digits(16);
  for (int i = 0; i < 2000; ++i) {
    const auto trace_id = new_trace_id();
    const auto span_id = new_span_id();
    for (std::size_t at = 0; at < 32; ++at) trace_digits[at].insert(trace_id[at]);
    for (std::size_t at = 0; at < 16; ++at) span_digits[at].insert(span_id[at]);
  }
  for (std::size_t at = 0; at < 32; ++at)
    EXPECT_EQ(trace_digits[at].size(), 16U) << "trace id position " << at;
  for (std::size_t at = 0; at < 16; ++at)
    EXPECT_EQ(span_digits[at].size(), 16U) << "span id position " << at;
}

TEST(TraceContextTest, NewContextFormatsToAParsableHeader) {
  trace_context context{new_trace_id(), new_span_id(), 1};
  auto header = format_traceparent(context);
  auto parsed = parse_traceparent(header);
  ASSERT_TRUE(parsed.has_value()) << header;
  EXPECT_EQ(parsed->trace_id, context.trace_id);
  EXPECT_EQ(parsed->span_id, context.span_id);
  EXPECT_EQ(parsed->flags, 1);
}

}  // namespace
}  // namespace tether
