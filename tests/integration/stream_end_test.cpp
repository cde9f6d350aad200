// A relayed stream ends at the answer's last event (contract, "HTTP surface"): the caller's body
// ends right behind `[DONE]`, `response.completed` or `message_stop`, however long the upstream
// keeps its own body open after it, and a caller who leaves as soon as it has read that event
// (Codex CLI does) was answered whole: outcome ok, the upstream's exchange read to its end.
#include <gtest/gtest.h>

#include <ostream>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

struct streaming_surface {
  std::string path;
  std::string name;
  std::string (*body)(const std::string& model);
  // Bytes only the answer's last event carries.
  std::string last_event_marker;
};

void PrintTo(const streaming_surface& s, std::ostream* os) {
  *os << s.path;
}

std::string chat_stream_body(const std::string& model) {
  return chat_body(model, true);
}

std::string responses_body(const std::string& model) {
  return R"({"model":")" + model + R"(","input":"hi","stream":true})";
}

std::string messages_body(const std::string& model) {
  return R"({"model":")" + model +
         R"(","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"stream":true})";
}

const streaming_surface chat{"/v1/chat/completions", "chat", chat_stream_body, "data: [DONE]"};
const streaming_surface responses{"/v1/responses", "responses", responses_body,
                                  "event: response.completed"};
const streaming_surface messages{"/v1/messages", "messages", messages_body, "event: message_stop"};

// The upstream's body stays open this long after its last event: a stream that waited for it
// would end after it, far beyond the bounds below.
constexpr auto linger = 4000ms;
const std::string lingering_model = "mock-stream-3x20-linger-4000";

class StreamEndTest : public ::testing::TestWithParam<streaming_surface> {
 protected:
  void SetUp() override {
    gw_ = std::make_unique<gateway_process>(
        gateway_config(mock_, "deadline_ms = 20000\nattempt_timeout_ms = 20000",
                       model_entry("lingering", lingering_model)));
  }

  stream_result stream(const std::string& request_id, stream_options options) {
    options.timeout = 15s;
    return stream_request("POST", gw_->port(), GetParam().path, GetParam().body("lingering"),
                          {{"x-request-id", request_id}}, options);
  }

  // The upstream wrote its whole answer and its body's end: tether read the exchange to its end
  // rather than cutting it.
  void expect_upstream_read_to_its_end(const std::string& request_id) {
    auto stats = mock_.wait_for_stats(
        [&](const auto& s) {
          auto es = entries_of(s, request_id);
          return es.size() == 1 && str(es[0].at("outcome")) != "in_progress";
        },
        linger + 5s);
    auto es = entries_of(stats, request_id);
    ASSERT_EQ(es.size(), 1u);
    EXPECT_EQ(str(es[0].at("outcome")), "completed");
  }

  void expect_answered_ok(const std::string& request_id) {
    // The line comes once the upstream connection ended, after the linger.
    auto line = access_line(*gw_, request_id, linger + 5s);
    ASSERT_TRUE(line) << request_id;
    EXPECT_EQ(str(line->at("outcome")), "ok");
    EXPECT_EQ(line->at("status").as_int64(), 200);
  }

  mock_server mock_;
  std::unique_ptr<gateway_process> gw_;
};

TEST_P(StreamEndTest, TheCallersStreamEndsAtTheAnswersLastEvent) {
  const auto id = GetParam().name + "-whole";
  auto r = stream(id, {});
  ASSERT_EQ(r.status, 200);
  ASSERT_EQ(r.end, stream_end::complete);
  const auto took = r.ended_at - r.sent_at;
  EXPECT_LT(took, linger / 2) << "the stream waited for the upstream's end of body";
  const auto at = r.body.rfind(GetParam().last_event_marker);
  ASSERT_NE(at, std::string::npos) << r.body;
  // Nothing after the last event: its end is the body's end.
  EXPECT_EQ(r.body.find("\n\n", at) + 2, r.body.size()) << r.body;
  expect_answered_ok(id);
  expect_upstream_read_to_its_end(id);
}

TEST_P(StreamEndTest, ACallerWhoLeavesAtTheLastEventWasAnsweredWhole) {
  const auto id = GetParam().name + "-leaves";
  stream_options options;
  std::string seen;
  options.on_piece = [&](const stream_piece& piece) {
    seen += piece.bytes;
    return seen.find(GetParam().last_event_marker) == std::string::npos;
  };
  auto r = stream(id, options);
  ASSERT_EQ(r.status, 200);
  ASSERT_NE(seen.find(GetParam().last_event_marker), std::string::npos) << seen;
  expect_answered_ok(id);
  expect_upstream_read_to_its_end(id);
}

INSTANTIATE_TEST_SUITE_P(StreamingSurfaces, StreamEndTest,
                         ::testing::Values(chat, responses, messages),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace tether::test
