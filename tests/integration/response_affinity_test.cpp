// previous_response_id affinity (issue 28): a Responses follow-up goes to the deployment that
// made the response it continues, because that upstream holds the conversation's state. Two
// mocks serve one model; tether learns each relayed response's id (whole or from a stream's
// first event) and routes the follow-ups by it.
#include <gtest/gtest.h>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

class ResponseAffinityRoutingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string cfg = "[server]\nlisten = \"127.0.0.1:0\"\n\n[request]\ndeadline_ms = 10000\n\n";
    for (auto* m : {&a_, &b_}) {
      const std::string name = m == &a_ ? "a" : "b";
      cfg += "[[upstreams]]\nname = \"" + name + "\"\nbase_url = \"" + m->url() + "\"\n\n";
      cfg += "[[models]]\nname = \"m\"\nupstream = \"" + name + "\"\nupstream_model = \"mock\"\n\n";
      cfg += "[[models]]\nname = \"m-stream\"\nupstream = \"" + name +
             "\"\nupstream_model = \"mock-stream-3x10\"\n\n";
    }
    cfg += "[telemetry]\nlog_format = \"json\"\n";
    gw_ = std::make_unique<gateway_process>(cfg);
  }

  std::int64_t served_by(mock_server& m) { return m.stats().at("requests").as_int64(); }

  http_response follow_up(const std::string& model, const std::string& previous) {
    return request("POST", gw_->port(), "/v1/responses",
                   R"({"model":")" + model + R"(","input":"and then?","previous_response_id":")" +
                       previous + R"("})");
  }

  mock_server a_;
  mock_server b_;
  std::unique_ptr<gateway_process> gw_;
};

TEST_F(ResponseAffinityRoutingTest, TenFollowUpsAllReachTheDeploymentThatMadeTheResponse) {
  auto first = request("POST", gw_->port(), "/v1/responses", R"({"model":"m","input":"hi"})");
  ASSERT_EQ(first.status, 200) << first.body;
  const auto id = str(first.json().at("id"));
  const bool on_a = served_by(a_) == 1;
  ASSERT_EQ(served_by(a_) + served_by(b_), 1);
  for (int i = 0; i < 10; ++i) {
    auto r = follow_up("m", id);
    ASSERT_EQ(r.status, 200) << r.body;
  }
  EXPECT_EQ(served_by(on_a ? a_ : b_), 11) << "every follow-up went where the response was made";
  EXPECT_EQ(served_by(on_a ? b_ : a_), 0);
}

TEST_F(ResponseAffinityRoutingTest, AStreamedResponsesIdIsLearnedFromItsFirstEvent) {
  stream_options opts;
  opts.timeout = 5s;
  auto s = stream_request("POST", gw_->port(), "/v1/responses",
                          R"({"model":"m-stream","input":"hi","stream":true})", {}, opts);
  ASSERT_EQ(s.status, 200);
  auto events = s.sse_events();
  ASSERT_FALSE(events.empty());
  ASSERT_EQ(events.front().name, "response.created");
  const auto id = str(boost::json::parse(events.front().data).at("response").at("id"));
  const bool on_a = served_by(a_) == 1;
  for (int i = 0; i < 10; ++i) ASSERT_EQ(follow_up("m", id).status, 200);
  EXPECT_EQ(served_by(on_a ? a_ : b_), 11);
  EXPECT_EQ(served_by(on_a ? b_ : a_), 0);
}

// An id tether never relayed is routed as usual: over both deployments.
TEST_F(ResponseAffinityRoutingTest, AnUnknownIdIsRoutedAsUsual) {
  for (int i = 0; i < 40; ++i) ASSERT_EQ(follow_up("m", "resp_never_seen").status, 200);
  EXPECT_GT(served_by(a_), 0);
  EXPECT_GT(served_by(b_), 0);
  EXPECT_EQ(served_by(a_) + served_by(b_), 40);
}

}  // namespace
}  // namespace tether::test
