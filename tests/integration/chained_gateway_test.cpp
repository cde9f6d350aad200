// Two gateways in a chain (docs/contract.md, lifecycle promise 1, the propagation margin): an
// outer tether with a deadline in front of an inner tether that inherits what is left of it
// through X-Request-Deadline-Ms, in front of a model that never answers. Both deadlines end
// within milliseconds of each other; whichever timer fires first, the caller gets the outer's
// 504 deadline_exceeded — never the inner's 504 relayed as 502 upstream_failed — every time.
#include <gtest/gtest.h>

#include <string>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

constexpr int outer_deadline_ms = 200;
constexpr int caller_budget_ms = 150;  // every other caller sets a shorter budget of its own
constexpr int margin_ms = 10;          // the contract's propagation margin
// How long the outer may take, at most, from a request's arrival to its attempt's start: what it
// passes on is at least the budget less this and the margin. A sanitized gateway is slower.
constexpr int start_slack_ms = TETHER_SANITIZED ? 130 : 100;

// The outer gateway: one upstream, the inner gateway; no retries, so an inner answer taken for
// the upstream's own failure would be the caller's answer at once (502).
std::string outer_config(const gateway_process& inner) {
  return "[server]\nlisten = \"127.0.0.1:0\"\n\n[request]\ndeadline_ms = " +
         std::to_string(outer_deadline_ms) +
         "\nmax_retries = 0\n\n[[upstreams]]\nname = \"inner\"\nbase_url = \"" + inner.url() +
         "\"\n" + every_surface +
         "\n\n[[models]]\nname = \"m\"\nupstream = \"inner\"\nupstream_model = \"m\"\n"
         "\n[telemetry]\nlog_format = \"json\"\n";
}

std::string id_of(int i) {
  return "chain-" + std::to_string(i);
}

TEST(ChainedGatewayTest, EveryRequestThroughTwoGatewaysEndsInTheCallersDeadline504) {
  mock_server model;
  // The inner gateway's own deadline is far off: only the inherited budget bounds its requests.
  gateway_process inner{gateway_config(model, "max_retries = 0", model_entry("m", "mock-hang"))};
  gateway_process outer{outer_config(inner)};

  constexpr int requests = 50;
  for (int i = 0; i < requests; ++i) {
    const bool own_budget = i % 2 == 1;
    const int budget_ms = own_budget ? caller_budget_ms : outer_deadline_ms;
    header_map headers{{"x-request-id", id_of(i)}};
    if (own_budget) headers.push_back({"x-request-deadline-ms", std::to_string(budget_ms)});
    auto r = request("POST", outer.port(), "/v1/chat/completions", chat_body("m"), headers);
    ASSERT_EQ(r.status, 504) << "request " << i << ": " << r.body;
    EXPECT_EQ(str(r.json().at("error").at("code")), "deadline_exceeded") << i << " " << r.body;
    ASSERT_NE(r.header("x-tether-outcome"), nullptr) << i;
    EXPECT_EQ(*r.header("x-tether-outcome"), "deadline_exceeded") << i;
    // The deadline's answer, not an early one: at most the margin before the budget ran out.
    EXPECT_GE(r.elapsed.count(), budget_ms - margin_ms - 1) << i;
  }

  ASSERT_EQ(await_access_lines(outer, requests, 10s), static_cast<std::size_t>(requests));
  ASSERT_EQ(await_access_lines(inner, requests, 10s), static_cast<std::size_t>(requests));
  for (int i = 0; i < requests; ++i) {
    const int budget_ms = i % 2 == 1 ? caller_budget_ms : outer_deadline_ms;
    auto outer_line = access_line(outer, id_of(i));
    ASSERT_TRUE(outer_line) << i;
    EXPECT_EQ(str(outer_line->at("outcome")), "deadline_exceeded") << i;
    // The inner was told the margin less than the outer had left when its attempt started.
    auto inner_line = access_line(inner, id_of(i));
    ASSERT_TRUE(inner_line) << i;
    const double inherited = num(inner_line->at("deadline_ms"));
    EXPECT_LE(inherited, budget_ms - margin_ms) << i;
    EXPECT_GT(inherited, budget_ms - margin_ms - start_slack_ms) << i;
  }

  // The model was reached by every request, each told the inner's remainder less the margin
  // again, and every connection to it was closed by a deadline.
  const auto stats =
      model.wait_for_stats([&](const auto& s) { return num(s.at("connections_open")) == 0; }, 5s);
  EXPECT_EQ(num(stats.at("requests")), requests);
  EXPECT_EQ(num(stats.at("connections_open")), 0);
  for (const auto& entry : mock_log(stats)) {
    const double told = std::stod(str(entry.at("headers").at("x-request-deadline-ms")));
    EXPECT_LE(told, outer_deadline_ms - 2 * margin_ms);
  }

  // The inner's answers were the deadline's: none counted against it, so it was never ejected
  // (five failures in a row would have).
  EXPECT_EQ(metric(outer.port(), "tether_upstream_healthy{upstream=\"inner\"}"), 1);
  EXPECT_EQ(metric(outer.port(),
                   "tether_upstream_ejections_total{upstream=\"inner\",reason=\"failures\"}"),
            0);
}

}  // namespace
}  // namespace tether::test
