// The budget a chained gateway inherits (docs/contract.md, "What the gateway sends upstream"):
// X-Request-Deadline-Ms upstream is what is left of the request's effective deadline when the
// attempt starts — the caller's own shorter one when it sent one, never a longer one — and no
// such header at all when the request has no deadline.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

class ForwardedDeadlineTest : public ::testing::Test {
 protected:
  void start(const std::string& request_keys) {
    gw_ = std::make_unique<gateway_process>(
        gateway_config(mock_, request_keys + "\nmax_retries = 0", model_entry("chat", "mock")));
  }

  struct seen_upstream {
    std::optional<double> deadline_ms;  // the forwarded header; nullopt when absent
    double sent_epoch_ms = 0;           // when the test sent the request
    double upstream_at_ms = 0;          // when the mock got it
  };

  // Sends one request with `headers` and returns what its one upstream attempt carried.
  seen_upstream send(const std::string& id, header_map headers) {
    headers.emplace_back("x-request-id", id);
    seen_upstream out;
    out.sent_epoch_ms = epoch_ms_now();
    auto r = request("POST", gw_->port(), "/v1/chat/completions", chat_body("chat"), headers);
    EXPECT_EQ(r.status, 200) << r.body;
    auto seen = entries_of(mock_.stats(), id);
    EXPECT_EQ(seen.size(), 1u) << id;
    if (seen.empty()) return out;
    out.upstream_at_ms = num(seen[0].at("started_ms"));
    const auto& h = seen[0].at("headers").as_object();
    if (const auto* v = h.if_contains("x-request-deadline-ms"))
      out.deadline_ms = std::stod(str(*v));
    return out;
  }

  // The contract's propagation margin: what is passed on is that much shorter than what is
  // left, so the chained gateway gives up first.
  static constexpr double margin_ms = 10.0;

  // What is left when the attempt starts, less the margin, is at most the budget less the
  // margin, and at least that less the time from the test's send to the mock's receipt (which
  // contains the attempt's start), less the millisecond the gateway rounds the time passed up by.
  static void expect_remaining_of(const seen_upstream& s, double budget_ms) {
    ASSERT_TRUE(s.deadline_ms) << "no X-Request-Deadline-Ms reached the upstream";
    EXPECT_LE(*s.deadline_ms, budget_ms - margin_ms);
    EXPECT_GE(*s.deadline_ms, budget_ms - margin_ms - (s.upstream_at_ms - s.sent_epoch_ms) - 1.0);
    EXPECT_GT(*s.deadline_ms, 0.0);
  }

  mock_server mock_;
  std::unique_ptr<gateway_process> gw_;
};

TEST_F(ForwardedDeadlineTest, ACallersShorterBudgetIsWhatTheUpstreamInherits) {
  start("deadline_ms = 20000");
  expect_remaining_of(send("short", {{"x-request-deadline-ms", "700"}}), 700);
  // The alias counts the same.
  expect_remaining_of(send("alias", {{"x-request-timeout-ms", "900"}}), 900);
}

TEST_F(ForwardedDeadlineTest, ACallersLongerBudgetDoesNotLengthenWhatIsPassedOn) {
  start("deadline_ms = 3000");
  expect_remaining_of(send("long", {{"x-request-deadline-ms", "60000"}}), 3000);
}

TEST_F(ForwardedDeadlineTest, NoDeadlineSendsNoDeadlineHeader) {
  start("deadline_ms = 0");
  auto s = send("unbounded", {});
  EXPECT_FALSE(s.deadline_ms) << "sent " << s.deadline_ms.value_or(-1);
  auto line = access_line(*gw_, "unbounded");
  ASSERT_TRUE(line);
  EXPECT_TRUE(line->at("deadline_ms").is_null()) << "the request was meant to be unbounded";
}

TEST_F(ForwardedDeadlineTest, WithTheDeadlineOffTheCallersOwnBudgetIsStillPassedOn) {
  start("deadline_ms = 0");
  expect_remaining_of(send("callers-only", {{"x-request-deadline-ms", "800"}}), 800);
}

}  // namespace
}  // namespace tether::test
