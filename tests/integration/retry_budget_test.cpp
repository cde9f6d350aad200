// The retry budget (issue 25): however many callers meet a failing upstream at once, tether's
// own retries to it stay within max(min_retry_concurrency, retry_budget_percent % of its
// requests in flight), so a failing upstream is not sent three times the load by its gateway;
// a lone caller still gets its retries.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

const std::string chat_path = "/v1/chat/completions";
// The budget: retries in flight to an upstream <= max(min_retry_concurrency, percent % of its
// requests in flight), stated here rather than taken from the defaults, for the bounds below.
constexpr int min_retry_concurrency = 3;
constexpr int retry_budget_percent = 20;

class RetryBudgetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A backoff long enough that the callers' retries overlap whatever the machine's speed
    // (full jitter: each waits 0..400 ms, then 0..800 ms).
    gw_ = std::make_unique<gateway_process>(gateway_config(
        mock_,
        "deadline_ms = 20000\nattempt_timeout_ms = 5000\nmax_retries = 2\n"
        "retry_backoff_ms = 400\nmin_retry_concurrency = " +
            std::to_string(min_retry_concurrency) +
            "\nretry_budget_percent = " + std::to_string(retry_budget_percent) + "\n",
        model_entry("failing", "mock-fail-503")));
  }

  double retries(const std::string& result) {
    return metric(gw_->port(), "tether_retries_total{upstream=\"mock\",result=\"" + result + "\"}");
  }

  mock_server mock_;
  std::unique_ptr<gateway_process> gw_;
};

TEST_F(RetryBudgetTest, ALoneCallerStillGetsItsRetries) {
  auto r = request("POST", gw_->port(), chat_path, chat_body("failing"),
                   {{"x-request-id", "lone-1"}}, 20s);
  EXPECT_EQ(r.status, 502);
  auto line = access_line(*gw_, "lone-1", 10s);
  ASSERT_TRUE(line);
  EXPECT_EQ(line->at("attempts").as_array().size(), 3u);
  EXPECT_EQ(mock_.stats().at("requests").to_number<std::int64_t>(), 3);
  EXPECT_EQ(retries("started"), 2);
  EXPECT_EQ(retries("budget_exhausted"), 0);
}

TEST_F(RetryBudgetTest, ManyCallersOnAFailingUpstreamDoNotTripleItsLoad) {
  constexpr int callers = 20;
  std::vector<std::thread> threads;
  std::atomic<int> bad_gateway{0};
  std::atomic<bool> go{false};
  for (int i = 0; i < callers; ++i) {
    threads.emplace_back([&, i] {
      while (!go.load()) std::this_thread::yield();
      auto r = request("POST", gw_->port(), chat_path, chat_body("failing"),
                       {{"x-request-id", "crowd-" + std::to_string(i)}}, 20s);
      if (r.status == 502) ++bad_gateway;
    });
  }
  go = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad_gateway.load(), callers);
  ASSERT_EQ(await_access_lines(*gw_, callers, 10s), static_cast<std::size_t>(callers));

  // What reached the upstream: the first attempts, plus no more retries than the budget admits
  // (20 % of 20 in flight, then the minimum of 3 as callers finish), not 2 retries each.
  const auto upstream_requests = mock_.stats().at("requests").to_number<std::int64_t>();
  std::size_t logged_attempts = 0;
  for (const auto& line : access_lines(*gw_))
    logged_attempts += line.at("attempts").as_array().size();
  std::printf(
      "[ figures ] %d callers, max_retries 2: %lld upstream requests (%zu logged "
      "attempts), retries started %.0f, refused %.0f\n",
      callers, static_cast<long long>(upstream_requests), logged_attempts, retries("started"),
      retries("budget_exhausted"));
  EXPECT_LE(upstream_requests,
            static_cast<std::int64_t>(callers * (1 + retry_budget_percent / 100.0) +
                                      min_retry_concurrency));
  EXPECT_EQ(static_cast<std::size_t>(upstream_requests), logged_attempts);
  EXPECT_EQ(retries("started") + callers, upstream_requests);
  EXPECT_GT(retries("budget_exhausted"), 0);
  // And no fewer than the budget's floor: every caller's first failure asks for a retry, and one
  // asked while fewer than min_retry_concurrency are in flight always starts, so the first
  // min_retry_concurrency of those asks start whatever the timing. A gateway that refused every
  // retry would pass the bounds above.
  EXPECT_GE(retries("started"), min_retry_concurrency);
}

}  // namespace
}  // namespace tether::test
