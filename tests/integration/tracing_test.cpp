// Traces a dashboard can trust (issue #5): the SERVER span of each request says how it ended,
// each attempt is a CLIENT span whose id is the traceparent the upstream saw, and a slow or dead
// collector costs requests nothing.
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/integration/harness.hpp"
#include "tests/support/otlp_receiver.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

std::string traced_config(const mock_server& mock, const otlp_receiver& otlp,
                          const std::string& request_keys, const std::string& models) {
  auto cfg = gateway_config(mock, request_keys, models);
  return cfg + "otlp_endpoint = \"" + otlp.endpoint() + "\"\n";  // [telemetry] is last
}

std::vector<boost::json::object> of_kind(const std::vector<boost::json::object>& spans, int kind) {
  std::vector<boost::json::object> out;
  for (const auto& s : spans) {
    if (s.at("kind").as_int64() == kind) out.push_back(s);
  }
  return out;
}

std::string attr_str(const boost::json::object& span, std::string_view key) {
  auto v = span_attribute(span, key);
  return v && v->is_string() ? std::string(v->as_string()) : "";
}
std::int64_t attr_int(const boost::json::object& span, std::string_view key) {
  auto v = span_attribute(span, key);
  return v && v->is_int64() ? v->as_int64() : -1;
}

TEST(TracingTest, ServerSpanOfAnUpstream500Carries502AndErrorType) {
  mock_server mock;
  otlp_receiver otlp;
  gateway_process gw{
      traced_config(mock, otlp, "max_retries = 0", model_entry("m", "mock-fail-500"))};
  ASSERT_EQ(request("POST", gw.port(), "/v1/chat/completions", chat_body("m")).status, 502);
  auto spans = otlp.wait_for_spans([](const auto& s) { return s.size() >= 2; });
  auto servers = of_kind(spans, 2);
  ASSERT_EQ(servers.size(), 1u);
  EXPECT_EQ(attr_int(servers[0], "http.response.status_code"), 502);
  EXPECT_EQ(attr_str(servers[0], "error.type"), "upstream_failed");
  EXPECT_EQ(attr_str(servers[0], "tether.outcome"), "upstream_failed");
  EXPECT_EQ(servers[0].at("status").at("code").as_int64(), 2);
  auto clients = of_kind(spans, 3);
  ASSERT_EQ(clients.size(), 1u);
  EXPECT_EQ(attr_int(clients[0], "http.response.status_code"), 500);
}

TEST(TracingTest, RetriedRequestHasOneClientSpanPerAttemptWithIncreasingResendCount) {
  mock_server mock;
  otlp_receiver otlp;
  gateway_process gw{traced_config(mock, otlp, "max_retries = 2\nretry_backoff_ms = 5",
                                   model_entry("m", "mock-fail-503"))};
  ASSERT_EQ(request("POST", gw.port(), "/v1/chat/completions", chat_body("m")).status, 502);
  auto spans = otlp.wait_for_spans([](const auto& s) { return s.size() >= 4; });
  auto servers = of_kind(spans, 2);
  auto clients = of_kind(spans, 3);
  ASSERT_EQ(servers.size(), 1u);
  ASSERT_EQ(clients.size(), 3u);
  std::sort(clients.begin(), clients.end(), [](const auto& a, const auto& b) {
    return std::stoull(std::string(a.at("startTimeUnixNano").as_string())) <
           std::stoull(std::string(b.at("startTimeUnixNano").as_string()));
  });
  EXPECT_EQ(attr_int(clients[0], "http.request.resend_count"), -1);  // absent on the first try
  EXPECT_EQ(attr_int(clients[1], "http.request.resend_count"), 1);
  EXPECT_EQ(attr_int(clients[2], "http.request.resend_count"), 2);
  // Each CLIENT span is a child of the SERVER span, and is what the upstream was told.
  auto seen = mock_log(mock.stats());
  ASSERT_EQ(seen.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(clients[i].at("parentSpanId"), servers[0].at("spanId"));
    EXPECT_EQ(clients[i].at("traceId"), servers[0].at("traceId"));
    auto tp = str(seen[i].at("headers").at("traceparent"));
    EXPECT_EQ(tp,
              "00-" + str(clients[i].at("traceId")) + "-" + str(clients[i].at("spanId")) + "-01");
  }
}

TEST(TracingTest, IncomingTraceparentIsJoined) {
  mock_server mock;
  otlp_receiver otlp;
  gateway_process gw{traced_config(mock, otlp, "", model_entry("m", "mock"))};
  const std::string trace = "4bf92f3577b34da6a3ce929d0e0e4736";
  const std::string parent = "00f067aa0ba902b7";
  ASSERT_EQ(request("POST", gw.port(), "/v1/chat/completions", chat_body("m"),
                    {{"traceparent", "00-" + trace + "-" + parent + "-01"}})
                .status,
            200);
  auto spans = otlp.wait_for_spans([](const auto& s) { return s.size() >= 2; });
  for (const auto& s : spans) EXPECT_EQ(str(s.at("traceId")), trace);
  auto servers = of_kind(spans, 2);
  ASSERT_EQ(servers.size(), 1u);
  EXPECT_EQ(str(servers[0].at("parentSpanId")), parent);
  EXPECT_EQ(attr_int(servers[0], "http.response.status_code"), 200);
  EXPECT_EQ(attr_str(servers[0], "tether.outcome"), "ok");
  auto upstream_tp = str(mock_log(mock.stats())[0].at("headers").at("traceparent"));
  EXPECT_EQ(upstream_tp.substr(3, 32), trace);
}

TEST(TracingTest, CallerLeavingIsRecordedAsEventsOnTheServerSpan) {
  mock_server mock;
  otlp_receiver otlp;
  gateway_process gw{traced_config(mock, otlp, "", model_entry("m", "mock-hang"))};
  stream_options opts;
  opts.close_after = 150ms;
  stream_request("POST", gw.port(), "/v1/chat/completions", chat_body("m"), {}, opts);
  auto spans = otlp.wait_for_spans([](const auto& s) { return s.size() >= 2; });
  auto servers = of_kind(spans, 2);
  ASSERT_EQ(servers.size(), 1u);
  EXPECT_TRUE(span_has_event(servers[0], "caller_left"));
  EXPECT_TRUE(span_has_event(servers[0], "cancel_sent"));
  EXPECT_TRUE(span_has_event(servers[0], "work_ended"));
  EXPECT_EQ(attr_str(servers[0], "tether.outcome"), "client_disconnected");
  EXPECT_EQ(attr_int(servers[0], "http.response.status_code"), -1);  // a 499 is never sent
}

double median_latency_ms(std::uint16_t port, int n) {
  std::vector<double> ms;
  http_connection conn{port};
  for (int i = 0; i < n; ++i) {
    ms.push_back(conn.request("POST", "/v1/chat/completions", chat_body("m")).elapsed.count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

TEST(TracingTest, HangingCollectorNeitherSlowsRequestsNorGrowsMemoryItDropsAndCounts) {
  mock_server mock;
  otlp_receiver hanging{otlp_mode::hang};
  gateway_process off{gateway_config(mock, "", model_entry("m", "mock"))};
  gateway_process traced{traced_config(mock, hanging, "", model_entry("m", "mock"))};
  // Interleaved, so both see the same machine load.
  double off_ms = 0, traced_ms = 0;
  for (int round = 0; round < 3; ++round) {
    off_ms += median_latency_ms(off.port(), 200);
    traced_ms += median_latency_ms(traced.port(), 200);
  }
  EXPECT_LT(traced_ms, off_ms * 1.5 + 3.0)
      << "off " << off_ms / 3 << " ms, traced " << traced_ms / 3;
  // 1,200 requests = 2,400 spans, plus 2,000 more requests: past the 4,096-span bound.
  http_connection conn{traced.port()};
  for (int i = 0; i < 2000; ++i) conn.request("POST", "/v1/chat/completions", chat_body("m"));
  auto metrics = request("GET", traced.port(), "/metrics").body;
  auto at = metrics.find("\ntether_trace_spans_dropped_total ");
  ASSERT_NE(at, std::string::npos);
  EXPECT_GT(std::stod(metrics.substr(at + 34)), 0.0);
  // One export in flight at a time, abandoned after export_timeout (2 s): no pile-up.
  EXPECT_LE(hanging.requests(), 5u);
}

}  // namespace
}  // namespace tether::test
