// What tether reports about upstream work equals what the upstream experienced: every request the
// upstream received is one attempt in the access log and in tether_upstream_attempts_total, and an
// attempt that never reached the upstream is none.
#include <gtest/gtest.h>

#include <string>

#include "tests/integration/harness.hpp"
#include "tests/support/leaving_client.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

// The sum of every tether_upstream_attempts_total series.
double attempts_total(std::uint16_t port) {
  const auto body = request("GET", port, "/metrics").body;
  const std::string name = "\ntether_upstream_attempts_total{";
  double sum = 0;
  for (auto at = body.find(name); at != std::string::npos; at = body.find(name, at + 1)) {
    const auto value = body.find("} ", at);
    sum += std::stod(body.substr(value + 2));
  }
  return sum;
}

std::size_t requests_with_id(const boost::json::object& stats, const std::string& id) {
  return entries_of(stats, id).size();
}

TEST(AccountingTest, ARequestTheUpstreamReadOnAKeptAliveConnectionIsNeverSentAgain) {
  mock_server mock;
  gateway_process gw{
      gateway_config(mock, "deadline_ms = 10000\nattempt_timeout_ms = 10000\nmax_retries = 0",
                     model_entry("fast", "mock") + model_entry("dropped", "mock-drop"))};
  // One connection, kept alive after the first answer; the second request travels on it and
  // the upstream resets it after reading the request.
  http_connection caller(gw.port());
  ASSERT_EQ(
      caller.request("POST", "/v1/chat/completions", chat_body("fast"), {{"x-request-id", "warm"}})
          .status,
      200);
  ASSERT_EQ(mock.stats().at("connections_open").as_int64(), 1);
  auto dropped = caller.request("POST", "/v1/chat/completions", chat_body("dropped"),
                                {{"x-request-id", "dropped"}});
  EXPECT_EQ(dropped.status, 502) << dropped.body;

  auto line = access_line(gw, "dropped");
  ASSERT_TRUE(line);
  ASSERT_EQ(line->at("attempts").as_array().size(), 1u);
  auto stats = mock.stats();
  // max_retries = 0: the upstream, which may have done the work, got the request once.
  EXPECT_EQ(requests_with_id(stats, "dropped"), 1u);
  ASSERT_TRUE(await_access_lines(gw, 2));
  EXPECT_EQ(attempts_total(gw.port()), static_cast<double>(stats.at("requests").as_int64()));
}

TEST(AccountingTest, ARequestThatNeverGotASlotHasAQueueWaitAndNoAttempt) {
  mock_server mock;
  gateway_process gw{
      gateway_config(mock, "deadline_ms = 10000\nattempt_timeout_ms = 10000\nmax_retries = 0",
                     model_entry("hang", "mock-hang") + model_entry("fast", "mock"),
                     "[budget]\nmax_in_flight = 1\n")};
  // The only slot is held by a hanging request whose caller leaves when the test is done.
  raw_connection holder(gw.port());
  const auto body = chat_body("hang");
  holder.send(
      "POST /v1/chat/completions HTTP/1.1\r\nhost: tether\r\ncontent-type: "
      "application/json\r\nx-request-id: holder\r\ncontent-length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body);
  ASSERT_EQ(mock.wait_for_stats([](const auto& s) { return s.at("active").as_int64() == 1; })
                .at("active")
                .as_int64(),
            1);

  // Its deadline passes while it waits for the slot.
  auto timed_out = request("POST", gw.port(), "/v1/chat/completions", chat_body("fast"),
                           {{"x-request-id", "queued-deadline"}, {"x-request-deadline-ms", "250"}});
  EXPECT_EQ(timed_out.status, 504);
  auto line = access_line(gw, "queued-deadline");
  ASSERT_TRUE(line);
  EXPECT_EQ(str(line->at("outcome")), "deadline_exceeded");
  EXPECT_TRUE(line->at("attempts").as_array().empty()) << boost::json::serialize(*line);
  EXPECT_GE(num(line->at("queue_wait_ms")), 200.0) << boost::json::serialize(*line);

  // Its caller leaves while it waits for the slot: once seen in the queue, and no answer came
  // for a while.
  ASSERT_TRUE(await_metric(gw.port(), "tether_queue_depth", 0));
  leaving_client gone{
      gw.port(), "/v1/chat/completions", chat_body("fast"), {{"x-request-id", "queued-gone"}}};
  ASSERT_TRUE(await_metric(gw.port(), "tether_queue_depth", 1));
  const auto seen_queued = test_clock::now();
  EXPECT_FALSE(gone.wait_head(150ms)) << "answered while it waited for the slot";
  const auto left_at = gone.leave();
  line = access_line(gw, "queued-gone");
  ASSERT_TRUE(line);
  EXPECT_EQ(str(line->at("outcome")), "client_disconnected");
  EXPECT_TRUE(line->at("attempts").as_array().empty()) << boost::json::serialize(*line);
  // It was in the queue from before it was seen there until after its caller left.
  EXPECT_GE(num(line->at("queue_wait_ms")), ms_double(left_at - seen_queued).count())
      << boost::json::serialize(*line);

  // Neither reached the upstream, and the counters say so.
  auto stats = mock.stats();
  EXPECT_EQ(requests_with_id(stats, "queued-deadline"), 0u);
  EXPECT_EQ(requests_with_id(stats, "queued-gone"), 0u);
  EXPECT_EQ(attempts_total(gw.port()), 0.0);  // the holder's attempt has not ended yet
  EXPECT_EQ(stats.at("requests").as_int64(), 1);
  holder.close();
  ASSERT_TRUE(access_line(gw, "holder"));
  EXPECT_EQ(attempts_total(gw.port()), 1.0);
}

}  // namespace
}  // namespace tether::test
