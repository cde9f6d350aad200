// The headers an SDK reads off a response to decide whether, and when, to retry it.
#include "actors/response_headers.hpp"

#include <string>

#include <gtest/gtest.h>

namespace tether {
namespace {

using std::chrono::milliseconds;

std::string value_of(const net::header_list& headers, const std::string& name) {
  const auto* v = net::find_header(headers, name);
  return v == nullptr ? "<none>" : *v;
}

TEST(ResponseHeadersTest, AnOkAnswerCarriesOnlyItsOutcome) {
  net::header_list h;
  add_outcome_headers(h, 200, outcome::ok);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(value_of(h, "x-tether-outcome"), "ok");
}

TEST(ResponseHeadersTest, AnUpstreamRetryAfterIsRepeatedInMilliseconds) {
  net::header_list h{{"retry-after", "3"}};
  add_outcome_headers(h, 429, outcome::upstream_rate_limited);
  EXPECT_EQ(value_of(h, "retry-after-ms"), "3000");
  EXPECT_NE(value_of(h, "x-should-retry"), "<none>");
}

TEST(ResponseHeadersTest, AGatewayErrorNamesItsRequestAndItsBody) {
  const auto h = error_headers("req-7", 504, outcome::deadline_exceeded);
  EXPECT_EQ(value_of(h, "content-type"), "application/json");
  EXPECT_EQ(value_of(h, "x-request-id"), "req-7");
  EXPECT_EQ(value_of(h, "x-tether-outcome"), "deadline_exceeded");
  EXPECT_EQ(value_of(h, "retry-after"), "<none>");
  EXPECT_EQ(value_of(h, "x-should-retry"), "false");  // the caller's own deadline has passed
}

TEST(ResponseHeadersTest, OverloadedAndShuttingDownAskForASecond) {
  for (auto o : {outcome::overloaded, outcome::shutting_down}) {
    const auto h = error_headers("req-1", 503, o);
    EXPECT_EQ(value_of(h, "retry-after"), "1") << to_string(o);
    EXPECT_EQ(value_of(h, "retry-after-ms"), "1000") << to_string(o);
  }
}

// Retry-After counts whole seconds: a wait of 1.5 s is announced as 2, never as 1 (an SDK
// coming back after one second would be refused again); the exact wait goes in retry-after-ms.
TEST(ResponseHeadersTest, AGivenWaitIsRoundedUpToSeconds) {
  const auto h = error_headers("req-1", 429, outcome::overloaded, milliseconds{1500});
  EXPECT_EQ(value_of(h, "retry-after"), "2");
  EXPECT_EQ(value_of(h, "retry-after-ms"), "1500");
}

}  // namespace
}  // namespace tether
