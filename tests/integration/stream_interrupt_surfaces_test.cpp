// Lifecycle promises 1 and 3 on the two surfaces whose streams have named events (contract, "The
// lifecycle promises"): the deadline or the stream idle timeout, mid-stream, ends a /v1/responses
// stream with the Responses API's `event: error` (`code` stream_interrupted) and then its own
// `event: response.failed` (the response failed, its error the same), and a /v1/messages
// stream with the Messages API's `event: error` (`error.type` api_error), then the stream ends and
// the upstream connection is closed. The chat surface's same cases are in lifecycle_test.cpp.
#include <gtest/gtest.h>

#include <ostream>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

struct named_surface {
  std::string path;
  std::string name;
  // The request body asking `model` for a stream.
  std::string (*body)(const std::string& model);
  // The event that only a stream relayed to its end carries.
  std::string last_upstream_event;
};

// gtest names a failing case's parameter by this, not by its bytes.
void PrintTo(const named_surface& s, std::ostream* os) {
  *os << s.path;
}

std::string responses_body(const std::string& model) {
  return R"({"model":")" + model + R"(","input":"hi","stream":true})";
}

std::string messages_body(const std::string& model) {
  return R"({"model":")" + model +
         R"(","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"stream":true})";
}

const named_surface responses{"/v1/responses", "responses", responses_body, "response.completed"};
const named_surface messages{"/v1/messages", "messages", messages_body, "message_stop"};

class StreamInterruptSurfacesTest : public ::testing::TestWithParam<named_surface> {
 protected:
  void start(const std::string& request_keys, const std::string& models) {
    gw_ = std::make_unique<gateway_process>(gateway_config(mock_, request_keys, models));
  }

  stream_result stream(const std::string& model, const std::string& request_id) {
    stream_options options;
    options.timeout = 10s;
    return stream_request("POST", gw_->port(), GetParam().path, GetParam().body(model),
                          {{"x-request-id", request_id}}, options);
  }

  // The stream ended (not cut) with the surface's own error event after some of the upstream's
  // events, never its last one; the error names `cause`. On /v1/responses the Responses API's
  // response.failed follows it, the stream's last event.
  void expect_error_event_end(const stream_result& r, const std::string& cause) {
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.end, stream_end::complete) << "the stream was cut instead of ended";
    auto events = r.sse_events();
    const bool responses = GetParam().name == "responses";
    const std::size_t ending = responses ? 2 : 1;  // the gateway's own events at the end
    ASSERT_GE(events.size(), ending + 1) << r.body;
    for (std::size_t i = 0; i + ending < events.size(); ++i) {
      EXPECT_NE(events[i].name, "error") << r.body;
      EXPECT_NE(events[i].name, "response.failed") << r.body;
      EXPECT_NE(events[i].name, GetParam().last_upstream_event) << "the stream ran to its end";
    }
    const auto& error_event = events[events.size() - ending];
    EXPECT_EQ(error_event.name, "error") << r.body;
    if (responses) expect_response_failed(events, cause);
    auto data = boost::json::parse(error_event.data).as_object();
    EXPECT_EQ(str(data.at("type")), "error");
    std::string message;
    if (GetParam().name == "responses") {
      EXPECT_EQ(str(data.at("code")), "stream_interrupted") << error_event.data;
      message = str(data.at("message"));
    } else {
      EXPECT_EQ(str(data.at("error").at("type")), "api_error") << error_event.data;
      message = str(data.at("error").at("message"));
    }
    EXPECT_NE(message.find(cause), std::string::npos) << error_event.data;
    // Nothing after the error event: it is the stream's last bytes.
    EXPECT_EQ(r.body.substr(r.body.size() - 2), "\n\n");
  }

  // The last event of a cut Responses stream: the response failed, named by the id the stream's
  // first event gave it, its sequence number after every event before it, the error's code the
  // outcome and its message the cause.
  void expect_response_failed(const std::vector<stream_result::sse_event>& events,
                              const std::string& cause) {
    const auto& last = events.back();
    EXPECT_EQ(last.name, "response.failed");
    auto data = boost::json::parse(last.data).as_object();
    EXPECT_EQ(str(data.at("type")), "response.failed");
    const auto created = boost::json::parse(events.front().data).as_object();
    ASSERT_EQ(str(created.at("type")), "response.created") << events.front().data;
    const auto& response = data.at("response").as_object();
    EXPECT_EQ(str(response.at("id")), str(created.at("response").at("id")));
    EXPECT_EQ(str(response.at("status")), "failed");
    EXPECT_EQ(str(response.at("error").at("code")), "stream_interrupted");
    EXPECT_NE(str(response.at("error").at("message")).find(cause), std::string::npos) << last.data;
    const auto relayed = boost::json::parse(events[events.size() - 3].data).as_object();
    EXPECT_GT(num(data.at("sequence_number")), num(relayed.at("sequence_number"))) << last.data;
  }

  // The upstream saw its connection closed by the gateway when the stream ended, long before
  // its own stream would have ended; the request's outcome is stream_interrupted.
  void expect_upstream_closed(const stream_result& r, const std::string& request_id) {
    auto stats = mock_.wait_for_stats([&](const auto& s) {
      auto es = entries_of(s, request_id);
      return es.size() == 1 && str(es[0].at("outcome")) != "in_progress";
    });
    auto es = entries_of(stats, request_id);
    ASSERT_EQ(es.size(), 1u) << "one attempt, never retried once committed";
    EXPECT_EQ(str(es[0].at("outcome")), "closed_by_client");
    EXPECT_LE(num(es[0].at("closed_ms")), epoch_ms(r.ended_at) + close_slack_ms);
    auto line = access_line(*gw_, request_id);
    ASSERT_TRUE(line) << request_id;
    EXPECT_EQ(str(line->at("outcome")), "stream_interrupted");
    EXPECT_EQ(line->at("status").as_int64(), 200);
    EXPECT_TRUE(await_metric(gw_->port(), "tether_upstream_work_in_flight{upstream=\"mock\"}", 0));
  }

  mock_server mock_;
  std::unique_ptr<gateway_process> gw_;
};

// 20 events 100 ms apart (2 s), cut by a 450 ms deadline.
TEST_P(StreamInterruptSurfacesTest, TheDeadlineMidStreamEndsWithTheSurfacesErrorEvent) {
  start("deadline_ms = 450\nattempt_timeout_ms = 10000\nstream_idle_timeout_ms = 10000",
        model_entry("long", "mock-stream-20x100"));
  const auto id = GetParam().name + "-deadline";
  auto r = stream("long", id);
  expect_error_event_end(r, "deadline");
  expect_upstream_closed(r, id);
}

// Five events 400 ms apart, cut by a 200 ms idle timeout after the first.
TEST_P(StreamInterruptSurfacesTest, TheStreamIdleTimeoutEndsWithTheSurfacesErrorEvent) {
  start("deadline_ms = 10000\nattempt_timeout_ms = 10000\nstream_idle_timeout_ms = 200",
        model_entry("gappy", "mock-stream-5x400"));
  const auto id = GetParam().name + "-idle";
  auto r = stream("gappy", id);
  expect_error_event_end(r, "idle");
  expect_upstream_closed(r, id);
  // Only the first piece (its delta) came before the gap that ended the stream.
  std::size_t deltas = 0;
  for (const auto& e : r.sse_events()) {
    if (e.name == "response.output_text.delta" || e.name == "content_block_delta") ++deltas;
  }
  EXPECT_EQ(deltas, 1u) << r.body;
}

INSTANTIATE_TEST_SUITE_P(NamedEventSurfaces, StreamInterruptSurfacesTest,
                         ::testing::Values(responses, messages),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace tether::test
