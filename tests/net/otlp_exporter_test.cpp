// otlp_exporter against tests/support/otlp_receiver on 127.0.0.1: what a collector receives, and
// what a slow, hanging or dead collector costs the code that submits spans (nothing but drops).
#include "net/otlp_exporter.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "net/io_runtime.hpp"
#include "tests/support/otlp_receiver.hpp"

namespace {

namespace json = boost::json;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using tether::net::otlp_exporter;
using tether::net::otlp_options;
using tether::net::span_data;
using tether::net::span_kind;
using tether::test::otlp_mode;
using tether::test::otlp_receiver;

constexpr auto wait_limit = 5s;
constexpr const char* trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";

std::string hex16(std::uint64_t n) {
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(n));
  return out;
}

span_data make_span(std::uint64_t n) {
  span_data span;
  span.trace_id = trace_id;
  span.span_id = hex16(n + 1);
  span.name = "POST /v1/chat/completions";
  span.start_unix_nano = 1'700'000'000'000'000'000ULL + n;
  span.end_unix_nano = span.start_unix_nano + 1000;
  return span;
}

// The exporter has no event for "a batch failed"; its counters are polled, within a bound.
bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout = 5s) {
  const auto deadline = steady::now() + timeout;
  while (!condition()) {
    if (steady::now() > deadline) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

// A port on which nothing listens: bound, read, released.
std::uint16_t closed_port() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(
      io, {boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(0)});
  return acceptor.local_endpoint().port();
}

void expect_accounted(const tether::net::otlp_stats& s) {
  EXPECT_EQ(s.submitted, s.exported + s.dropped + s.pending)
      << "exported " << s.exported << " dropped " << s.dropped << " pending " << s.pending;
}

// ---- encoding ------------------------------------------------------------------------------

TEST(OtlpEncodingTest, SampleSpanFollowsTheProtobufJsonMapping) {
  span_data span;
  span.trace_id = trace_id;
  span.span_id = "00f067aa0ba902b7";
  span.parent_span_id = "a3ce929d0e0e4736";
  span.name = "chat upstream";
  span.kind = span_kind::client;
  span.start_unix_nano = 1'700'000'000'123'456'789ULL;
  span.end_unix_nano = 1'700'000'001'987'654'321ULL;
  span.attributes = {{"http.request.method", std::string("POST")},
                     {"http.request.resend_count", std::int64_t{9'007'199'254'740'993}},
                     {"tether.ratio", 0.25},
                     {"tether.streamed", true}};
  span.events = {{"cancel_sent", 1'700'000'001'000'000'001ULL},
                 {"work_ended", 1'700'000'001'900'000'000ULL}};
  span.error = true;
  span.status_message = "upstream_timeout";

  const auto body = json::parse(tether::net::encode_otlp_json({span}, "tether-test")).as_object();
  ASSERT_EQ(body.size(), 1u);
  const auto& resource_spans = body.at("resourceSpans").as_array();
  ASSERT_EQ(resource_spans.size(), 1u);
  const auto& resource = resource_spans[0].at("resource").as_object();
  EXPECT_EQ(resource.at("attributes"),
            json::parse(R"([{"key":"service.name","value":{"stringValue":"tether-test"}}])"));
  const auto& scope_spans = resource_spans[0].at("scopeSpans").as_array();
  ASSERT_EQ(scope_spans.size(), 1u);
  EXPECT_EQ(scope_spans[0].at("scope").at("name"), "tether");
  const auto& spans = scope_spans[0].at("spans").as_array();
  ASSERT_EQ(spans.size(), 1u);
  const auto& s = spans[0].as_object();

  EXPECT_EQ(s.at("traceId"), trace_id);
  EXPECT_EQ(s.at("spanId"), "00f067aa0ba902b7");
  EXPECT_EQ(s.at("parentSpanId"), "a3ce929d0e0e4736");
  EXPECT_EQ(s.at("name"), "chat upstream");
  EXPECT_EQ(s.at("kind"), 3);  // SPAN_KIND_CLIENT, as an integer
  // 64-bit integers are decimal strings in the JSON mapping.
  EXPECT_EQ(s.at("startTimeUnixNano"), "1700000000123456789");
  EXPECT_EQ(s.at("endTimeUnixNano"), "1700000001987654321");
  EXPECT_EQ(s.at("attributes"), json::parse(R"([
      {"key":"http.request.method","value":{"stringValue":"POST"}},
      {"key":"http.request.resend_count","value":{"intValue":"9007199254740993"}},
      {"key":"tether.ratio","value":{"doubleValue":0.25}},
      {"key":"tether.streamed","value":{"boolValue":true}}])"));
  EXPECT_EQ(s.at("events"), json::parse(R"([
      {"timeUnixNano":"1700000001000000001","name":"cancel_sent"},
      {"timeUnixNano":"1700000001900000000","name":"work_ended"}])"));
  EXPECT_EQ(s.at("status"), json::parse(R"({"code":2,"message":"upstream_timeout"})"));
}

TEST(OtlpEncodingTest, RootServerSpanWithoutErrorHasNoParentAndUnsetStatus) {
  auto span = make_span(0);
  const auto body = json::parse(tether::net::encode_otlp_json({span}, "tether"));
  const auto& s = body.at("resourceSpans").at(0).at("scopeSpans").at(0).at("spans").at(0);
  EXPECT_FALSE(s.as_object().contains("parentSpanId"));
  EXPECT_EQ(s.at("kind"), 2);  // SPAN_KIND_SERVER
  EXPECT_EQ(s.at("status"), json::parse(R"({"code":0})"));
  EXPECT_EQ(s.at("attributes"), json::array{});
  EXPECT_EQ(s.at("events"), json::array{});
}

TEST(OtlpEncodingTest, NonFiniteDoublesAreSpelledAsTheMappingsStrings) {
  auto span = make_span(0);
  span.attributes = {{"nan", std::numeric_limits<double>::quiet_NaN()},
                     {"inf", std::numeric_limits<double>::infinity()},
                     {"-inf", -std::numeric_limits<double>::infinity()}};
  const auto body = json::parse(tether::net::encode_otlp_json({span}, "tether"));
  const auto& s = body.at("resourceSpans").at(0).at("scopeSpans").at(0).at("spans").at(0);
  EXPECT_EQ(s.at("attributes"), json::parse(R"([
      {"key":"nan","value":{"doubleValue":"NaN"}},
      {"key":"inf","value":{"doubleValue":"Infinity"}},
      {"key":"-inf","value":{"doubleValue":"-Infinity"}}])"));
}

TEST(OtlpEncodingTest, TextIsEscapedIntoValidJson) {
  auto span = make_span(0);
  span.name = "quote\" backslash\\ newline\n tab\t \x01";
  span.attributes = {{"k\"ey", std::string("v\"al\r\n")}};
  const auto body = json::parse(tether::net::encode_otlp_json({span}, "svc\"name"));
  const auto& s = body.at("resourceSpans").at(0).at("scopeSpans").at(0).at("spans").at(0);
  EXPECT_EQ(s.at("name"), json::value(span.name));
  EXPECT_EQ(tether::test::span_attribute(s.as_object(), "k\"ey"), json::value("v\"al\r\n"));
}

// ---- exporting -----------------------------------------------------------------------------

class OtlpExporterTest : public testing::Test {
 protected:
  otlp_options options_for(const std::string& endpoint) {
    otlp_options options;
    options.endpoint = endpoint;
    options.service_name = "tether-test";
    options.flush_interval = 20ms;
    return options;
  }

  tether::net::io_runtime io_;  // declared first: outlives every exporter of a test
};

TEST_F(OtlpExporterTest, LiveCollectorGetsEverySpanInBoundedBatches) {
  otlp_receiver receiver;
  auto options = options_for(receiver.endpoint());
  options.max_batch = 100;
  otlp_exporter exporter(io_, options);

  std::set<std::string> sent;
  for (std::uint64_t i = 0; i < 1000; ++i) {
    auto span = make_span(i);
    sent.insert(span.span_id);
    exporter.submit(std::move(span));
  }
  auto spans = receiver.wait_for_spans([](const auto& s) { return s.size() >= 1000; });
  ASSERT_EQ(spans.size(), 1000u);
  std::set<std::string> received;
  for (const auto& span : spans) received.insert(std::string(span.at("spanId").as_string()));
  EXPECT_EQ(received, sent);

  for (const auto& body : receiver.bodies()) {
    const auto parsed = json::parse(body);
    EXPECT_EQ(parsed.at("resourceSpans").at(0).at("resource").at("attributes").at(0).at("value"),
              json::parse(R"({"stringValue":"tether-test"})"));
    EXPECT_LE(parsed.at("resourceSpans").at(0).at("scopeSpans").at(0).at("spans").as_array().size(),
              100u);
  }
  // shutdown() waits for the last acknowledgement, so the counters are final afterwards.
  exporter.shutdown(wait_limit);
  const auto s = exporter.stats();
  EXPECT_EQ(s.exported, 1000u);
  EXPECT_EQ(s.dropped, 0u);
  EXPECT_EQ(s.failed_batches, 0u);
  EXPECT_EQ(s.pending, 0u);
  expect_accounted(s);
}

TEST_F(OtlpExporterTest, FullBatchIsSentWithoutWaitingForTheFlushInterval) {
  otlp_receiver receiver;
  auto options = options_for(receiver.endpoint());
  options.flush_interval = std::chrono::hours(1);
  options.max_batch = 10;
  otlp_exporter exporter(io_, options);

  for (std::uint64_t i = 0; i < 10; ++i) exporter.submit(make_span(i));
  auto spans = receiver.wait_for_spans([](const auto& s) { return s.size() >= 10; });
  EXPECT_EQ(spans.size(), 10u);
  EXPECT_EQ(receiver.bodies().size(), 1u);
}

TEST_F(OtlpExporterTest, PartialBatchIsSentOnTheFlushInterval) {
  otlp_receiver receiver;
  auto options = options_for(receiver.endpoint());
  options.flush_interval = 50ms;
  otlp_exporter exporter(io_, options);

  const auto start = steady::now();
  for (std::uint64_t i = 0; i < 3; ++i) exporter.submit(make_span(i));
  auto spans = receiver.wait_for_spans([](const auto& s) { return s.size() >= 3; });
  EXPECT_EQ(spans.size(), 3u);
  EXPECT_LT(steady::now() - start, 2s);
}

TEST_F(OtlpExporterTest, EndpointWithoutPathPostsToV1Traces) {
  otlp_receiver receiver;  // collects only what is POSTed to /v1/traces
  otlp_exporter exporter(io_, options_for("http://127.0.0.1:" + std::to_string(receiver.port())));
  exporter.submit(make_span(0));
  EXPECT_EQ(receiver.wait_for_spans([](const auto& s) { return !s.empty(); }).size(), 1u);
}

TEST_F(OtlpExporterTest, HangingCollectorNeverSlowsSubmitAndBoundsMemory) {
  otlp_receiver receiver(otlp_mode::hang);
  auto options = options_for(receiver.endpoint());
  options.max_queue = 1000;
  options.max_batch = 100;
  options.export_timeout = 60s;  // the one export stays stuck for the whole test
  otlp_exporter exporter(io_, options);

  // One batch reaches the collector and is never answered.
  for (std::uint64_t i = 0; i < 100; ++i) exporter.submit(make_span(i));
  ASSERT_TRUE(receiver.wait_for_requests(1));

  constexpr std::size_t n = 100'000;
  std::vector<span_data> spans;
  spans.reserve(n);
  for (std::uint64_t i = 0; i < n; ++i) spans.push_back(make_span(100 + i));

  auto slowest = steady::duration::zero();
  for (auto& span : spans) {
    const auto before = steady::now();
    exporter.submit(std::move(span));
    slowest = std::max(slowest, steady::now() - before);
  }
  // A submit that waited on the stuck export would wait for its 60 s timeout; one that did not
  // is far below a second, however loaded the machine.
  EXPECT_LT(slowest, 1s);

  const auto s = exporter.stats();
  EXPECT_EQ(s.submitted, n + 100);
  EXPECT_LE(s.pending, options.max_queue);
  EXPECT_GE(s.dropped, n + 100 - options.max_queue);
  EXPECT_EQ(s.exported, 0u);
  expect_accounted(s);
  // Still only the one export in flight: a slow collector is never sent a second batch.
  EXPECT_EQ(receiver.requests(), 1u);
}

TEST_F(OtlpExporterTest, ExportTimeoutCancelsAHangingExportAndDropsItsBatch) {
  otlp_receiver receiver(otlp_mode::hang);
  auto options = options_for(receiver.endpoint());
  options.max_batch = 5;
  options.export_timeout = 100ms;
  otlp_exporter exporter(io_, options);

  for (std::uint64_t i = 0; i < 5; ++i) exporter.submit(make_span(i));
  ASSERT_TRUE(eventually([&] { return exporter.failed_batches() >= 1; }));
  EXPECT_EQ(exporter.dropped(), 5u);

  // The collector recovers: the next batch goes on a new connection and is delivered.
  receiver.set_mode(otlp_mode::normal);
  for (std::uint64_t i = 5; i < 10; ++i) exporter.submit(make_span(i));
  auto spans = receiver.wait_for_spans([](const auto& s) { return s.size() >= 5; });
  EXPECT_EQ(spans.size(), 5u);
  EXPECT_GE(receiver.connections(), 2u);
  exporter.shutdown(wait_limit);
  EXPECT_EQ(exporter.exported(), 5u);
  expect_accounted(exporter.stats());
}

TEST_F(OtlpExporterTest, DownCollectorCountsFailedBatchesAndDropsThem) {
  auto options = options_for("http://127.0.0.1:" + std::to_string(closed_port()) + "/v1/traces");
  options.max_batch = 10;
  otlp_exporter exporter(io_, options);

  for (std::uint64_t i = 0; i < 30; ++i) exporter.submit(make_span(i));
  ASSERT_TRUE(eventually([&] { return exporter.failed_batches() >= 3; }));
  exporter.shutdown(wait_limit);
  const auto s = exporter.stats();
  EXPECT_EQ(s.exported, 0u);
  EXPECT_EQ(s.dropped, 30u);
  EXPECT_EQ(s.pending, 0u);
  expect_accounted(s);
}

TEST_F(OtlpExporterTest, NonSuccessStatusFailsTheBatchWithoutRetry) {
  otlp_receiver receiver(otlp_mode::fail);
  auto options = options_for(receiver.endpoint());
  options.max_batch = 5;
  otlp_exporter exporter(io_, options);

  for (std::uint64_t i = 0; i < 5; ++i) exporter.submit(make_span(i));
  exporter.shutdown(wait_limit);
  EXPECT_EQ(exporter.failed_batches(), 1u);
  EXPECT_EQ(exporter.dropped(), 5u);
  EXPECT_EQ(exporter.exported(), 0u);
  EXPECT_EQ(receiver.requests(), 1u);  // the 503 was not retried
}

TEST_F(OtlpExporterTest, ShutdownFlushesWhatIsQueued) {
  otlp_receiver receiver;
  auto options = options_for(receiver.endpoint());
  options.flush_interval = std::chrono::hours(1);
  otlp_exporter exporter(io_, options);

  for (std::uint64_t i = 0; i < 7; ++i) exporter.submit(make_span(i));
  exporter.shutdown(wait_limit);
  EXPECT_EQ(exporter.exported(), 7u);
  EXPECT_EQ(receiver.spans().size(), 7u);

  // Closed for good: later spans are dropped and counted.
  exporter.submit(make_span(7));
  EXPECT_EQ(exporter.dropped(), 1u);
  expect_accounted(exporter.stats());
}

TEST_F(OtlpExporterTest, ShutdownIsBoundedWhenTheCollectorHangs) {
  otlp_receiver receiver(otlp_mode::hang);
  auto options = options_for(receiver.endpoint());
  options.max_batch = 10;
  options.export_timeout = 60s;
  otlp_exporter exporter(io_, options);

  for (std::uint64_t i = 0; i < 50; ++i) exporter.submit(make_span(i));
  ASSERT_TRUE(receiver.wait_for_requests(1));

  const auto start = steady::now();
  exporter.shutdown(300ms);
  const auto took = steady::now() - start;
  EXPECT_GE(took, 290ms);
  EXPECT_LT(took, 1s);
  // The stuck export is cancelled, so its batch ends up counted too.
  ASSERT_TRUE(eventually([&] { return exporter.pending() == 0; }));
  const auto s = exporter.stats();
  EXPECT_EQ(s.dropped, 50u);
  EXPECT_EQ(s.failed_batches, 1u);
  expect_accounted(s);
}

TEST_F(OtlpExporterTest, DestroyingAnExporterWithAnExportInFlightIsSafe) {
  otlp_receiver receiver(otlp_mode::hang);
  {
    auto options = options_for(receiver.endpoint());
    options.max_batch = 1;
    otlp_exporter exporter(io_, options);
    exporter.submit(make_span(0));
    ASSERT_TRUE(receiver.wait_for_requests(1));
  }
  // The io thread still runs the cancelled exchange's handlers; a second exporter works.
  otlp_receiver live;
  otlp_exporter next(io_, options_for(live.endpoint()));
  next.submit(make_span(1));
  EXPECT_EQ(live.wait_for_spans([](const auto& s) { return !s.empty(); }).size(), 1u);
}

TEST_F(OtlpExporterTest, SpansWithMalformedIdsAreDroppedNotSent) {
  otlp_receiver receiver;
  otlp_exporter exporter(io_, options_for(receiver.endpoint()));

  auto upper = make_span(0);
  upper.trace_id = "4BF92F3577B34DA6A3CE929D0E0E4736";
  auto short_id = make_span(1);
  short_id.span_id = "abc";
  auto zero = make_span(2);
  zero.span_id = "0000000000000000";
  auto bad_parent = make_span(3);
  bad_parent.parent_span_id = "xyz";
  for (auto* span : {&upper, &short_id, &zero, &bad_parent}) exporter.submit(std::move(*span));
  exporter.submit(make_span(4));

  exporter.shutdown(wait_limit);
  EXPECT_EQ(exporter.dropped(), 4u);
  EXPECT_EQ(exporter.exported(), 1u);
  ASSERT_EQ(receiver.spans().size(), 1u);
  EXPECT_EQ(receiver.spans()[0].at("spanId"), json::value(hex16(5)));
}

TEST_F(OtlpExporterTest, EndpointThatIsNotAnHttpUrlIsRejected) {
  for (const char* bad :
       {"", "127.0.0.1:4318/v1/traces", "ftp://127.0.0.1/v1/traces", "http://",
        "http://:4318/v1/traces", "http://127.0.0.1:0/v1/traces",
        "http://127.0.0.1:99999/v1/traces", "http://127.0.0.1:43a8/v1/traces",
        "http://user@127.0.0.1/v1/traces", "http://[::1/v1/traces", "http://127.0.0.1:/v1/traces",
        "http://[::1]:/v1/traces", "http://[::1]x/v1/traces"}) {
    otlp_options options;
    options.endpoint = bad;
    EXPECT_THROW(otlp_exporter(io_, options), std::invalid_argument) << bad;
  }
}

TEST_F(OtlpExporterTest, HttpAndHttpsUrlsWithOrWithoutPortAreAccepted) {
  for (const char* good : {"http://127.0.0.1:4318/v1/traces", "HTTP://collector/v1/traces",
                           "https://collector.example", "http://[::1]:4318/v1/traces",
                           "http://[::1]/v1/traces?tenant=a"}) {
    otlp_options options;
    options.endpoint = good;
    EXPECT_NO_THROW(otlp_exporter(io_, options)) << good;
  }
}

}  // namespace
