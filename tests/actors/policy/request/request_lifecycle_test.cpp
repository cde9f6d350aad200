#include "actors/policy/request/request_lifecycle.hpp"

#include <gtest/gtest.h>

#include <array>
#include <random>
#include <vector>

#include "actors/policy/request/retry_budget.hpp"
#include "actors/policy/routing/router.hpp"
#include "actors/policy/routing/upstream_health.hpp"

namespace tether {
namespace {

using namespace std::chrono_literals;
using kind = lifecycle_command::kind;

// "llama" on upstream a, falling back to "small" on upstream b.
config::gateway_config two_models() {
  config::gateway_config cfg;
  for (const char* name : {"a", "b"}) {
    config::upstream_config u;
    u.name = name;
    cfg.upstreams.push_back(u);
  }
  config::model_config llama;
  llama.name = "llama";
  llama.upstream = "a";
  llama.upstream_model = "llama";
  llama.fallbacks = {"small"};
  config::model_config small;
  small.name = "small";
  small.upstream = "b";
  small.upstream_model = "small";
  cfg.models = {llama, small};
  cfg.request.max_retries = 1;
  cfg.request.retry_backoff = 100ms;
  cfg.request.attempt_timeout = 1000ms;
  return cfg;
}

std::vector<kind> kinds(const request_lifecycle::commands& cs) {
  std::vector<kind> out;
  for (const auto& c : cs) out.push_back(c.what);
  return out;
}

const lifecycle_command* find(const request_lifecycle::commands& cs, kind k) {
  for (const auto& c : cs)
    if (c.what == k) return &c;
  return nullptr;
}

class RequestLifecycleTest : public ::testing::Test {
 protected:
  explicit RequestLifecycleTest(std::uint32_t retry_min = 3, std::uint32_t retry_percent = 20)
      : cfg_(two_models()),
        routes_(cfg_),
        retries_(cfg_.upstreams.size(), retry_min, retry_percent) {
    health_.configure(cfg_);
  }

  // A request for llama arriving at t0 with `budget` (nullopt: unbounded); the backoff's jitter
  // is pinned to its maximum.
  request_lifecycle make(std::optional<millis> budget = 10s) {
    return request_lifecycle{cfg_,
                             routes_,
                             retries_,
                             health_,
                             routes_.chain_of("llama"),
                             surface::chat,
                             request_deadline{t0_, budget},
                             [](std::int64_t n) { return n; }};
  }

  // Every shared count the request took is back.
  void expect_nothing_held() {
    for (std::size_t u = 0; u < cfg_.upstreams.size(); ++u) {
      EXPECT_EQ(retries_.retries_in_flight(u), 0U) << u;
      EXPECT_EQ(retries_.requests_in_flight(u), 0U) << u;
    }
  }

  config::gateway_config cfg_;
  router routes_;
  retry_budget retries_;
  upstream_health health_;
  steady_time t0_ = steady_time{} + 1000s;
};

TEST_F(RequestLifecycleTest, StartArmsTheDeadlineAndStartsTheFirstAttemptWithItsPerTryTimer) {
  auto lc = make(10s);
  const auto& cs = lc.start(t0_);
  ASSERT_EQ(kinds(cs), (std::vector{kind::arm_deadline, kind::start_attempt}));
  EXPECT_EQ(cs[0].at, t0_ + 10s);
  EXPECT_EQ(cs[1].attempt, 0U);
  EXPECT_EQ(routes_.at(cs[1].deployment).model, "llama");
  EXPECT_EQ(cs[1].delay, 1000ms);
  // Its socket closes at the request's deadline, on its own.
  EXPECT_EQ(cs[1].close_at, t0_ + 10s);
}

TEST_F(RequestLifecycleTest, UnboundedRequestStartsAttemptsWhoseSocketNeverClosesOnItsOwn) {
  auto lc = make(std::nullopt);
  const auto& cs = lc.start(t0_);
  ASSERT_EQ(kinds(cs), (std::vector{kind::start_attempt}));
  EXPECT_EQ(cs[0].close_at, std::nullopt);
  EXPECT_EQ(cs[0].deadline_left, std::nullopt);
}

TEST_F(RequestLifecycleTest, RetryAttemptClosesAtTheSameDeadlineAsTheFirst) {
  auto lc = make(10s);
  lc.start(t0_);
  const auto generation =
      find(lc.on_response(503, std::nullopt, t0_ + 1s), kind::arm_backoff)->generation;
  const auto& cs = lc.on_backoff_due(generation, t0_ + 2s);
  const auto* retry = find(cs, kind::start_attempt);
  ASSERT_NE(retry, nullptr);
  EXPECT_EQ(retry->close_at, t0_ + 10s);
  EXPECT_EQ(retry->deadline_left, 8s - propagation_margin);
}

// ---- the propagation margin -----------------------------------------------------------------

// A chained gateway is told the margin less than is left (so it gives up first), and whatever
// failure reaches the request within the margin is the deadline's: 504 deadline_exceeded at once,
// not a retry, not a 502, and nothing counted against the upstream.
TEST_F(RequestLifecycleTest, AnUpstreamsFailureWithinTheMarginIsTheDeadlines) {
  // One failure counted against an upstream would eject it.
  for (auto& u : cfg_.upstreams) u.eject_after_failures = 1;
  health_.configure(cfg_);
  for (const int status : {504, 502, 503, 500}) {
    auto lc = make(400ms);
    const auto* first = find(lc.start(t0_), kind::start_attempt);
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(first->deadline_left, 390ms);
    const auto inner_due = t0_ + *first->deadline_left;
    const auto& cs = lc.on_response(status, std::nullopt, inner_due + 200us);
    ASSERT_EQ(kinds(cs),
              (std::vector{kind::attempt_over, kind::send_error, kind::caller_side_over}))
        << status;
    EXPECT_EQ(cs[0].result, outcome::deadline_exceeded);
    EXPECT_EQ(cs[0].status, status);  // the attempt's record keeps what the upstream said
    EXPECT_EQ(cs[1].result, outcome::deadline_exceeded);
    EXPECT_EQ(cs[1].status, 504);
    EXPECT_TRUE(lc.on_attempt_exited(0, inner_due + 300us).empty());
    EXPECT_EQ(kinds(lc.on_connection_ended()), (std::vector{kind::finish}));
    EXPECT_TRUE(health_.available(0, inner_due + 1ms)) << status;
  }
  for (const auto end : {attempt_end::reset, attempt_end::connect_failed, attempt_end::malformed,
                         attempt_end::timeout}) {
    auto lc = make(400ms);
    lc.start(t0_);
    const auto& cs = lc.on_attempt_failed(end, "x", false, t0_ + 395ms);
    ASSERT_NE(find(cs, kind::send_error), nullptr);
    EXPECT_EQ(find(cs, kind::send_error)->result, outcome::deadline_exceeded);
    EXPECT_EQ(find(cs, kind::start_attempt), nullptr);
    EXPECT_EQ(find(cs, kind::arm_backoff), nullptr);
    EXPECT_TRUE(health_.available(0, t0_ + 396ms)) << static_cast<int>(end);
  }
  expect_nothing_held();
}

TEST_F(RequestLifecycleTest, BeforeTheMarginAFailureIsRetriedAndWithinItASuccessStillAnswers) {
  auto lc = make(400ms);
  lc.start(t0_);
  // 11 ms left: an ordinary failure, retried.
  EXPECT_NE(find(lc.on_response(504, std::nullopt, t0_ + 389ms), kind::arm_backoff), nullptr);
  auto ok = make(400ms);
  ok.start(t0_);
  const auto& cs = ok.on_response(200, std::nullopt, t0_ + 399ms);
  ASSERT_NE(find(cs, kind::send_response), nullptr);
  EXPECT_EQ(ok.result(), outcome::ok);
  // A 4xx is the caller's, a 429 the upstream's rate: neither is the deadline's.
  auto rejected = make(400ms);
  rejected.start(t0_);
  EXPECT_EQ(find(rejected.on_response(400, std::nullopt, t0_ + 399ms), kind::send_response)->result,
            outcome::upstream_rejected);
}

// A request without a deadline has no margin: a 504 is an upstream's failure as always.
TEST_F(RequestLifecycleTest, AnUnboundedRequestHasNoMargin) {
  auto lc = make(std::nullopt);
  lc.start(t0_);
  EXPECT_NE(find(lc.on_response(504, std::nullopt, t0_ + 10h), kind::arm_backoff), nullptr);
}

TEST_F(RequestLifecycleTest, PerTryTimerIsNotArmedWhenTheDeadlineComesFirst) {
  auto lc = make(500ms);
  const auto& cs = lc.start(t0_);
  ASSERT_NE(find(cs, kind::start_attempt), nullptr);
  EXPECT_EQ(find(cs, kind::start_attempt)->delay, 0ms);
}

TEST_F(RequestLifecycleTest, SpentBudgetIsAnswered504WithoutAnAttemptAndFinishesAtOnce) {
  auto lc = make(0ms);
  const auto& cs = lc.start(t0_);
  ASSERT_EQ(kinds(cs), (std::vector{kind::send_error, kind::caller_side_over, kind::finish}));
  EXPECT_EQ(cs[0].result, outcome::deadline_exceeded);
  EXPECT_EQ(cs[0].status, 504);
  expect_nothing_held();
}

// A client's retry of a call (call_table.hpp) retries only what its earlier tries left of the
// model's max_retries; its fallbacks keep their own.
TEST_F(RequestLifecycleTest, ARetryOfACallRetriesOnlyWhatItsEarlierTriesLeft) {
  auto lc = make();
  lc.retry_of_call();
  lc.carry_attempts(1);  // max_retries = 1: the earlier try spent the retry
  lc.start(t0_);
  const auto& cs = lc.on_response(503, std::nullopt, t0_ + 10ms);
  EXPECT_EQ(find(cs, kind::arm_backoff), nullptr) << "no retry left on llama";
  ASSERT_NE(find(cs, kind::start_attempt), nullptr);
  EXPECT_EQ(routes_.at(find(cs, kind::start_attempt)->deployment).model, "small");
  // More carried than the model allows still makes one attempt (the gateway answers a call
  // whose attempts are all spent before the lifecycle starts: out_of_attempts).
  auto more = make();
  more.retry_of_call();
  more.carry_attempts(7);
  ASSERT_NE(find(more.start(t0_), kind::start_attempt), nullptr);
  EXPECT_EQ(more.upstream_attempts(), 1U);
}

TEST_F(RequestLifecycleTest, ACallOutOfAttemptsIsAnsweredItsLastOutcomeWithoutAnAttempt) {
  auto lc = make();
  lc.retry_of_call();
  lc.out_of_attempts(outcome::upstream_failed);
  const auto& cs = lc.start(t0_);
  ASSERT_EQ(kinds(cs), (std::vector{kind::send_error, kind::caller_side_over, kind::finish}));
  EXPECT_EQ(cs[0].result, outcome::upstream_failed);
  EXPECT_EQ(cs[0].status, 502);
  EXPECT_NE(cs[0].message.find("spent by its earlier tries"), std::string::npos) << cs[0].message;
  EXPECT_TRUE(lc.call_out_of_attempts());
  EXPECT_EQ(lc.upstream_attempts(), 0U);
  expect_nothing_held();
}

TEST_F(RequestLifecycleTest, ResponseIsSentOnceAndTheRequestFinishesOnlyAfterItsConnectionEnded) {
  auto lc = make();
  lc.start(t0_);
  const auto& cs = lc.on_response(200, std::nullopt, t0_ + 5ms);
  ASSERT_EQ(kinds(cs),
            (std::vector{kind::attempt_over, kind::send_response, kind::caller_side_over}));
  EXPECT_EQ(cs[1].result, outcome::ok);
  EXPECT_TRUE(lc.answered());
  EXPECT_TRUE(lc.on_attempt_exited(0, t0_ + 6ms).empty());  // its socket is still open
  EXPECT_EQ(kinds(lc.on_connection_ended()), (std::vector{kind::finish}));
  expect_nothing_held();
}

TEST_F(RequestLifecycleTest, UpstreamFourHundredPassesThroughAsRejectedWithoutRetry) {
  auto lc = make();
  lc.start(t0_);
  const auto& cs = lc.on_response(404, std::nullopt, t0_ + 5ms);
  ASSERT_NE(find(cs, kind::send_response), nullptr);
  EXPECT_EQ(find(cs, kind::send_response)->result, outcome::upstream_rejected);
  EXPECT_EQ(find(cs, kind::start_attempt), nullptr);
}

TEST_F(RequestLifecycleTest,
       DeadlineBeforeTheResponseAnswers504ThenCancelsAndIgnoresTheLateResponse) {
  auto lc = make();
  lc.start(t0_);
  const auto& cs = lc.on_deadline();
  ASSERT_EQ(kinds(cs), (std::vector{kind::attempt_over, kind::send_error, kind::caller_side_over,
                                    kind::cancel_attempt}));
  EXPECT_EQ(cs[1].result, outcome::deadline_exceeded);
  EXPECT_EQ(cs[3].reason, stop_reason::deadline);
  EXPECT_EQ(cs[3].attempt, 0U);
  EXPECT_TRUE(cs[3].behind_answers);
  // The cancelled attempt's answer was already on its way.
  EXPECT_TRUE(lc.on_response(200, std::nullopt, t0_ + 10s).empty());
  EXPECT_EQ(lc.result(), outcome::deadline_exceeded);
  EXPECT_TRUE(lc.on_connection_ended().empty());  // its attempt actor has not ended yet
  EXPECT_EQ(kinds(lc.on_attempt_exited(0, t0_ + 10s)), (std::vector{kind::finish}));
  expect_nothing_held();
}

TEST_F(RequestLifecycleTest, ResponseBeforeTheDeadlineWinsAndTheDeadlineThenDoesNothing) {
  auto lc = make();
  lc.start(t0_);
  lc.on_response(200, std::nullopt, t0_ + 5ms);
  EXPECT_TRUE(lc.on_deadline().empty());
  EXPECT_EQ(lc.result(), outcome::ok);
}

TEST_F(RequestLifecycleTest, ClientGoneCancelsTheAttemptAndIsLoggedAs499WithoutAnAnswer) {
  auto lc = make();
  lc.start(t0_);
  const auto& cs = lc.on_client_gone();
  ASSERT_EQ(kinds(cs),
            (std::vector{kind::cancel_attempt, kind::attempt_over, kind::caller_side_over}));
  EXPECT_EQ(cs[0].reason, stop_reason::client_gone);
  EXPECT_FALSE(cs[0].behind_answers);  // its close is all that is waited for
  EXPECT_EQ(lc.result(), outcome::client_disconnected);
  EXPECT_EQ(lc.status(), 499);
}

TEST_F(RequestLifecycleTest, ClientGoneDuringBackoffStartsNoRetryAndReturnsTheRetryToken) {
  auto lc = make();
  lc.start(t0_);
  const auto& failed = lc.on_response(503, std::nullopt, t0_ + 5ms);
  ASSERT_NE(find(failed, kind::arm_backoff), nullptr);
  const auto generation = find(failed, kind::arm_backoff)->generation;
  EXPECT_EQ(find(failed, kind::arm_backoff)->delay, 100ms);  // jitter pinned to its maximum
  EXPECT_EQ(retries_.retries_in_flight(0), 1U);
  lc.on_attempt_exited(0, t0_ + 6ms);
  const auto& gone = lc.on_client_gone();
  EXPECT_EQ(find(gone, kind::cancel_attempt), nullptr);  // no attempt is in flight
  EXPECT_NE(find(gone, kind::caller_side_over), nullptr);
  EXPECT_TRUE(lc.on_backoff_due(generation, t0_ + 105ms).empty());
  EXPECT_EQ(kinds(lc.on_connection_ended()), (std::vector{kind::finish}));
  expect_nothing_held();
}

TEST_F(RequestLifecycleTest, BackoffDueStartsTheRetryOnTheSameModel) {
  auto lc = make();
  lc.start(t0_);
  const auto generation =
      find(lc.on_response(503, std::nullopt, t0_), kind::arm_backoff)->generation;
  const auto& cs = lc.on_backoff_due(generation, t0_ + 100ms);
  ASSERT_EQ(kinds(cs), (std::vector{kind::start_attempt}));
  EXPECT_EQ(cs[0].attempt, 1U);
  EXPECT_EQ(routes_.at(cs[0].deployment).model, "llama");
  EXPECT_TRUE(lc.on_backoff_due(generation, t0_ + 100ms).empty());  // a stale timer
}

TEST_F(RequestLifecycleTest, SpentRetriesFallBackToTheNextModelAtOnce) {
  auto lc = make();
  lc.start(t0_);
  auto generation = find(lc.on_response(503, std::nullopt, t0_), kind::arm_backoff)->generation;
  lc.on_backoff_due(generation, t0_ + 100ms);
  const auto& cs = lc.on_response(503, std::nullopt, t0_ + 110ms);
  ASSERT_NE(find(cs, kind::start_attempt), nullptr);
  EXPECT_EQ(routes_.at(find(cs, kind::start_attempt)->deployment).model, "small");
  EXPECT_EQ(lc.model(), "small");
}

TEST_F(RequestLifecycleTest, EveryModelSpentAnswersTheExhaustedOutcome) {
  auto lc = make();
  lc.start(t0_);
  std::uint64_t generation = 0;
  generation = find(lc.on_attempt_failed(attempt_end::timeout, "attempt timed out", false, t0_),
                    kind::arm_backoff)
                   ->generation;
  lc.on_backoff_due(generation, t0_);
  lc.on_attempt_failed(attempt_end::timeout, "attempt timed out", false, t0_);  // → small
  generation = find(lc.on_attempt_failed(attempt_end::timeout, "attempt timed out", false, t0_),
                    kind::arm_backoff)
                   ->generation;
  lc.on_backoff_due(generation, t0_);
  const auto& cs = lc.on_attempt_failed(attempt_end::timeout, "attempt timed out", false, t0_);
  ASSERT_NE(find(cs, kind::send_error), nullptr);
  EXPECT_EQ(find(cs, kind::send_error)->result, outcome::upstream_timeout);
  EXPECT_EQ(find(cs, kind::send_error)->status, 504);
  EXPECT_EQ(lc.attempts_started(), 4U);
}

// A pooled connection the upstream had closed before it could read the request: the request
// goes again at once to the same deployment on a new connection, as an attempt of its own logged
// stale_connection; no retry is spent (the model's max_retries, the retry budget) and nothing
// counts against the upstream.
TEST_F(RequestLifecycleTest, AStaleConnectionIsSentAgainAtOnceOnANewConnectionSpendingNoRetry) {
  for (auto& u : cfg_.upstreams) u.eject_after_failures = 1;
  health_.configure(cfg_);
  auto lc = make();
  const auto first = *find(lc.start(t0_), kind::start_attempt);
  EXPECT_FALSE(first.fresh_connection);
  // Again and again: a stale connection is never a failure, however often it comes.
  for (std::uint32_t n = 1; n <= 3; ++n) {
    const auto& cs = lc.on_attempt_failed(attempt_end::stale_connection, "closed", false, t0_);
    ASSERT_EQ(kinds(cs), (std::vector{kind::attempt_over, kind::start_attempt}));
    EXPECT_TRUE(cs[0].stale_connection);
    EXPECT_EQ(cs[1].attempt, n);
    EXPECT_EQ(cs[1].deployment, first.deployment);
    EXPECT_TRUE(cs[1].fresh_connection);
    EXPECT_EQ(cs[1].close_at, first.close_at);
    EXPECT_EQ(retries_.retries_in_flight(0), 0U);
    EXPECT_TRUE(health_.available(0, t0_ + 1ms));
  }
  // The model's one retry is still there: the next failure is retried after a backoff, on a
  // connection the pool may give.
  auto* backoff =
      find(lc.on_attempt_failed(attempt_end::reset, "reset", false, t0_), kind::arm_backoff);
  ASSERT_NE(backoff, nullptr);
  const auto& retry = lc.on_backoff_due(backoff->generation, t0_ + 100ms);
  ASSERT_EQ(kinds(retry), (std::vector{kind::start_attempt}));
  EXPECT_FALSE(retry[0].fresh_connection);
  EXPECT_EQ(retries_.retries_in_flight(0), 1U);
  // A retry's stale connection keeps the retry's token through the attempt that carries it on.
  lc.on_attempt_failed(attempt_end::stale_connection, "closed", false, t0_ + 101ms);
  EXPECT_EQ(retries_.retries_in_flight(0), 1U);
  const auto& answer = lc.on_response(200, std::nullopt, t0_ + 102ms);
  ASSERT_NE(find(answer, kind::send_response), nullptr);
  EXPECT_EQ(retries_.retries_in_flight(0), 0U);
  EXPECT_EQ(lc.attempts_started(), 6U);
}

TEST_F(RequestLifecycleTest, OverloadedAttemptIsFinalWithoutRetry) {
  auto lc = make();
  lc.start(t0_);
  const auto& cs = lc.on_attempt_failed(attempt_end::overloaded, "queue full", false, t0_);
  ASSERT_NE(find(cs, kind::send_error), nullptr);
  EXPECT_EQ(find(cs, kind::send_error)->result, outcome::overloaded);
  EXPECT_EQ(find(cs, kind::send_error)->message, "gateway overloaded: queue full");
  EXPECT_EQ(find(cs, kind::start_attempt), nullptr);
}

// ---- a token cap that can never hold the request ------------------------------------------

// "llama" on a falls back to "small" on b, then to "last" on c; `small_on_c` adds a second
// deployment of "small", on c.
config::gateway_config three_models(bool small_on_c = false) {
  auto cfg = two_models();
  config::upstream_config c;
  c.name = "c";
  cfg.upstreams.push_back(c);
  cfg.models[0].fallbacks = {"small", "last"};
  config::model_config last;
  last.name = "last";
  last.upstream = "c";
  last.upstream_model = "last";
  cfg.models.push_back(last);
  if (small_on_c) {
    auto small = cfg.models[1];
    small.upstream = "c";
    cfg.models.push_back(small);
  }
  cfg.request.max_retries = 0;
  return cfg;
}

class RequestLifecycleTokenCapTest : public ::testing::Test {
 protected:
  void build(config::gateway_config cfg) {
    cfg_ = std::move(cfg);
    routes_.emplace(cfg_);
    retries_.emplace(cfg_.upstreams.size(), 3, 20);
    health_.configure(cfg_);
  }
  request_lifecycle make(const std::string& model) {
    return request_lifecycle{cfg_,
                             *routes_,
                             *retries_,
                             health_,
                             routes_->chain_of(model),
                             surface::chat,
                             request_deadline{t0_, 10s},
                             [](std::int64_t n) { return n; },
                             [this] { return draw_++ * 0x9e3779b97f4a7c15ULL; }};
  }
  config::gateway_config cfg_;
  std::optional<router> routes_;
  std::optional<retry_budget> retries_;
  upstream_health health_;
  std::uint64_t draw_ = 0;
  steady_time t0_ = steady_time{} + 1000s;
};

// docs/contract.md: a fallback whose upstream's cap is too small "is refused that attempt,
// `overloaded`, and the chain goes on" — at once, spending no retry.
TEST_F(RequestLifecycleTokenCapTest, AFallbackWhoseCapIsTooSmallIsPassedAndTheChainGoesOn) {
  build(three_models());
  auto lc = make("llama");
  lc.start(t0_);
  const auto* to_small = find(lc.on_response(503, std::nullopt, t0_), kind::start_attempt);
  ASSERT_NE(to_small, nullptr);
  EXPECT_EQ(routes_->at(to_small->deployment).model, "small");
  const auto& cs = lc.on_attempt_failed(
      attempt_end::too_heavy, "its token weight 2000 is more than its upstream's cap", false, t0_);
  ASSERT_EQ(kinds(cs), (std::vector{kind::attempt_over, kind::start_attempt}));
  EXPECT_EQ(cs[0].result, outcome::overloaded);
  EXPECT_EQ(routes_->at(cs[1].deployment).model, "last");
  EXPECT_EQ(cs[1].upstream, 2U);
  EXPECT_EQ(lc.on_response(200, std::nullopt, t0_).size(), 3U);
  EXPECT_EQ(lc.result(), outcome::ok);
}

// The model's other deployment may hold it: that one is tried before any fallback, and the one
// whose cap refused is never tried again, not even by a retry once both were tried.
TEST_F(RequestLifecycleTokenCapTest,
       AnotherDeploymentOfTheModelIsTriedFirstAndTheRefusingOneNever) {
  auto cfg = three_models(/*small_on_c=*/true);
  cfg.request.max_retries = 1;
  build(cfg);
  for (int i = 0; i < 16; ++i) {
    auto lc = make("small");
    const auto* first = find(lc.start(t0_), kind::start_attempt);
    ASSERT_NE(first, nullptr);
    const auto refused = first->deployment;  // the list is reused by the next event
    const auto* next =
        find(lc.on_attempt_failed(attempt_end::too_heavy, "x", false, t0_), kind::start_attempt);
    ASSERT_NE(next, nullptr);
    const auto holder = next->deployment;
    EXPECT_EQ(routes_->at(holder).model, "small") << i;
    EXPECT_NE(holder, refused) << i;
    EXPECT_EQ(retries_->retries_in_flight(routes_->at(refused).upstream), 0U) << "not a retry";
    // Its 503 is retried, on the same deployment: the refusing one is out of the choice.
    const auto* backoff = find(lc.on_response(503, std::nullopt, t0_), kind::arm_backoff);
    ASSERT_NE(backoff, nullptr) << i;
    const auto* retry = find(lc.on_backoff_due(backoff->generation, t0_), kind::start_attempt);
    ASSERT_NE(retry, nullptr) << i;
    EXPECT_EQ(retry->deployment, holder) << i;
    // Its second 503 spends the model, which has no fallback: the chain ends.
    const auto& end = lc.on_response(503, std::nullopt, t0_);
    EXPECT_EQ(find(end, kind::start_attempt), nullptr) << i;
    ASSERT_NE(find(end, kind::send_error), nullptr);
    EXPECT_EQ(find(end, kind::send_error)->result, outcome::upstream_failed);
  }
}

// At the chain's end the request gets what its upstream attempts earned; with none, it was the
// gateway's no: overloaded. A refusal never counts against the upstream.
TEST_F(RequestLifecycleTokenCapTest, AtTheChainsEndTheUpstreamsFailureOrOverloadedIsAnswered) {
  build(three_models());
  cfg_.models[0].fallbacks = {"small"};
  routes_.emplace(cfg_);
  auto lc = make("llama");
  lc.start(t0_);
  lc.on_response(503, std::nullopt, t0_);
  const auto& cs = lc.on_attempt_failed(attempt_end::too_heavy, "too heavy", false, t0_);
  ASSERT_NE(find(cs, kind::send_error), nullptr);
  EXPECT_EQ(find(cs, kind::send_error)->result, outcome::upstream_failed);
  EXPECT_EQ(find(cs, kind::send_error)->message, "upstream failed: status 503");
  for (int i = 0; i < 10; ++i) {
    auto only = make("small");
    only.start(t0_);
    const auto& refused = only.on_attempt_failed(attempt_end::too_heavy, "too heavy", false, t0_);
    ASSERT_NE(find(refused, kind::send_error), nullptr);
    EXPECT_EQ(find(refused, kind::send_error)->result, outcome::overloaded);
    EXPECT_EQ(find(refused, kind::send_error)->message, "gateway overloaded: too heavy");
  }
  EXPECT_TRUE(health_.available(1, t0_ + 1ms));
}

// The budget's no at the drain's end says the gateway is shutting down, not that it is overloaded:
// the caller learns to go elsewhere rather than to come back here.
TEST_F(RequestLifecycleTest, ASlotRefusedByTheDrainsEndAnswersShuttingDown) {
  auto lc = make();
  lc.start(t0_);
  const auto& cs =
      lc.on_attempt_failed(attempt_end::shutting_down, "the gateway is shutting down", false, t0_);
  ASSERT_NE(find(cs, kind::send_error), nullptr);
  EXPECT_EQ(find(cs, kind::send_error)->result, outcome::shutting_down);
  EXPECT_EQ(find(cs, kind::send_error)->status, 503);
  EXPECT_EQ(find(cs, kind::send_error)->message, "the gateway is shutting down");
  EXPECT_EQ(find(cs, kind::start_attempt), nullptr);
}

class RequestLifecycleNoRetryBudgetTest : public RequestLifecycleTest {
 protected:
  RequestLifecycleNoRetryBudgetTest() : RequestLifecycleTest(0, 0) {}
};

TEST_F(RequestLifecycleNoRetryBudgetTest, RetryOverTheUpstreamsBudgetFallsBackInstead) {
  auto lc = make();
  lc.start(t0_);
  const auto& cs = lc.on_response(503, std::nullopt, t0_);
  ASSERT_NE(find(cs, kind::retry_asked), nullptr);
  EXPECT_FALSE(find(cs, kind::retry_asked)->granted);
  EXPECT_EQ(find(cs, kind::retry_asked)->upstream, 0U);
  ASSERT_NE(find(cs, kind::start_attempt), nullptr);
  EXPECT_EQ(routes_.at(find(cs, kind::start_attempt)->deployment).model, "small");
}

TEST_F(RequestLifecycleTest, StreamIsRelayedAfterItsHeadAndEndsOnce) {
  auto lc = make();
  lc.start(t0_);
  EXPECT_FALSE(lc.relays_events());
  EXPECT_EQ(kinds(lc.on_stream_head(200)), (std::vector{kind::start_stream}));
  EXPECT_TRUE(lc.relays_events());
  EXPECT_EQ(kinds(lc.on_stream_end()),
            (std::vector{kind::end_stream, kind::attempt_over, kind::caller_side_over}));
  EXPECT_FALSE(lc.relays_events());
  EXPECT_TRUE(lc.on_stream_end().empty());
}

TEST_F(RequestLifecycleTest, DeadlineMidStreamInterruptsItWithATimeoutEvent) {
  auto lc = make();
  lc.start(t0_);
  lc.on_stream_head(200);
  const auto& cs = lc.on_deadline();
  ASSERT_NE(find(cs, kind::interrupt_stream), nullptr);
  EXPECT_EQ(find(cs, kind::interrupt_stream)->type, "timeout_error");
  EXPECT_EQ(find(cs, kind::send_error), nullptr);
  EXPECT_EQ(find(cs, kind::cancel_attempt)->reason, stop_reason::deadline);
  EXPECT_EQ(lc.result(), outcome::stream_interrupted);
  EXPECT_EQ(lc.status(), 200);
}

TEST_F(RequestLifecycleTest, DrainMidStreamInterruptsItAndCancelsWithTheDrainReason) {
  auto lc = make();
  lc.start(t0_);
  lc.on_stream_head(200);
  const auto& cs = lc.on_drain();
  ASSERT_NE(find(cs, kind::interrupt_stream), nullptr);
  EXPECT_NE(find(cs, kind::interrupt_stream)->message.find("shutting down"), std::string::npos);
  EXPECT_EQ(find(cs, kind::cancel_attempt)->reason, stop_reason::drain);
  EXPECT_FALSE(find(cs, kind::cancel_attempt)->behind_answers);
}

TEST_F(RequestLifecycleTest, DrainBeforeAnyByteAnswers503) {
  auto lc = make();
  lc.start(t0_);
  const auto& cs = lc.on_drain();
  ASSERT_NE(find(cs, kind::send_error), nullptr);
  EXPECT_EQ(find(cs, kind::send_error)->result, outcome::shutting_down);
  EXPECT_EQ(find(cs, kind::send_error)->status, 503);
}

TEST_F(RequestLifecycleTest, FailureAfterTheStreamCommittedInterruptsItWithoutRetry) {
  auto lc = make();
  lc.start(t0_);
  lc.on_stream_head(200);
  const auto& cs = lc.on_attempt_failed(attempt_end::reset, "connection reset", true, t0_);
  ASSERT_NE(find(cs, kind::interrupt_stream), nullptr);
  EXPECT_EQ(find(cs, kind::interrupt_stream)->type, "upstream_error");
  EXPECT_EQ(find(cs, kind::start_attempt), nullptr);
  EXPECT_EQ(find(cs, kind::arm_backoff), nullptr);
}

TEST_F(RequestLifecycleTest, AttemptEndingWithoutAReportIsAFailureAndIsRetried) {
  auto lc = make();
  lc.start(t0_);
  const auto& cs = lc.on_attempt_exited(0, t0_ + 1ms);
  ASSERT_NE(find(cs, kind::attempt_over), nullptr);
  EXPECT_EQ(find(cs, kind::attempt_over)->result, outcome::internal_error);
  EXPECT_NE(find(cs, kind::arm_backoff), nullptr);
}

TEST_F(RequestLifecycleTest, EarlierAttemptEndingAfterItsRetryStartedChangesNothing) {
  cfg_.request.retry_backoff = 0ms;  // the retry starts at once, before the first actor ends
  auto lc = make();
  lc.start(t0_);
  const auto& retry = lc.on_response(503, std::nullopt, t0_);
  ASSERT_NE(find(retry, kind::start_attempt), nullptr);
  EXPECT_EQ(find(retry, kind::start_attempt)->attempt, 1U);
  EXPECT_TRUE(lc.on_attempt_exited(0, t0_).empty());
  EXPECT_FALSE(lc.answered());
  EXPECT_NE(find(lc.on_response(200, std::nullopt, t0_), kind::send_response), nullptr);
}

TEST_F(RequestLifecycleTest, DeadlinePassedBeforeTheRetryAnswers504NotAnotherAttempt) {
  auto lc = make(50ms);
  lc.start(t0_);
  auto generation = find(lc.on_response(503, std::nullopt, t0_), kind::arm_backoff)->generation;
  const auto& cs = lc.on_backoff_due(generation, t0_ + 60ms);
  ASSERT_NE(find(cs, kind::send_error), nullptr);
  EXPECT_EQ(find(cs, kind::send_error)->result, outcome::deadline_exceeded);
  EXPECT_EQ(find(cs, kind::start_attempt), nullptr);
}

TEST_F(RequestLifecycleTest, DestroyedMidAttemptGivesBackTheRoutersAndTheRetryBudgetsCounts) {
  {
    auto lc = make();
    lc.start(t0_);
    auto generation = find(lc.on_response(503, std::nullopt, t0_), kind::arm_backoff)->generation;
    lc.on_backoff_due(generation, t0_ + 100ms);
  }
  expect_nothing_held();
}

// Every order of events an actor can see, drawn at random: the caller is answered (or left)
// exactly once, nothing is sent after that, and the request finishes exactly once, only when
// every attempt and connection it started has ended.
TEST_F(RequestLifecycleTest, AnyOrderOfEventsAnswersExactlyOnceAndFinishesAfterAllWorkEnded) {
  cfg_.request.max_retries = 2;
  std::mt19937 rng{20261202};
  for (int round = 0; round < 3000; ++round) {
    cfg_.request.retry_backoff = (round % 3 == 0) ? 0ms : 100ms;
    auto lc = make(round % 5 == 0 ? std::optional<millis>{} : std::optional<millis>{1s});
    int answers = 0;
    int finishes = 0;
    std::uint32_t started = 0;
    std::vector<std::uint32_t> live;  // attempts whose actor has not ended
    std::vector<bool> reported;
    std::uint32_t connections_open = 0;
    std::uint64_t generation = 0;
    bool backoff_pending = false;
    auto t = t0_;
    auto take = [&](const request_lifecycle::commands& cs) {
      for (const auto& c : cs) {
        switch (c.what) {
          case kind::caller_side_over:
            ++answers;
            break;
          case kind::send_response:
          case kind::send_error:
          case kind::start_stream:
          case kind::interrupt_stream:
          case kind::end_stream:
            EXPECT_EQ(answers, 0) << "round " << round << ": sent after the caller's side ended";
            break;
          case kind::start_attempt:
            EXPECT_EQ(answers, 0) << "round " << round;
            EXPECT_EQ(c.attempt, started);
            ++started;
            live.push_back(c.attempt);
            reported.push_back(false);
            ++connections_open;
            break;
          case kind::arm_backoff:
            generation = c.generation;
            backoff_pending = true;
            break;
          case kind::finish:
            ++finishes;
            EXPECT_TRUE(live.empty()) << "round " << round;
            EXPECT_EQ(connections_open, 0U) << "round " << round;
            break;
          default:
            break;
        }
      }
    };
    take(lc.start(t));
    for (int step = 0; step < 12 && finishes == 0; ++step) {
      t += 7ms;
      const std::uint32_t current = started == 0 ? 0 : started - 1;
      const bool may_report = started > 0 && !reported[current];
      switch (rng() % 11) {
        case 0:
          if (may_report) {
            reported[current] = true;
            take(lc.on_response(std::array{200, 400, 429, 503}[rng() % 4], std::nullopt, t));
          }
          break;
        case 1:
          if (may_report) take(lc.on_stream_head(200));
          break;
        case 2:
          if (may_report) {
            reported[current] = true;
            take(lc.on_stream_end());
          }
          break;
        case 3:
          if (may_report) {
            reported[current] = true;
            take(lc.on_attempt_failed(rng() % 2 ? attempt_end::reset : attempt_end::timeout, "x",
                                      rng() % 2 == 0, t));
          }
          break;
        case 4:
          if (!live.empty()) {
            auto i = rng() % live.size();
            auto a = live[i];
            live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
            take(lc.on_attempt_exited(a, t));
          }
          break;
        case 5:
          if (connections_open > 0) {
            --connections_open;
            take(lc.on_connection_ended());
          }
          break;
        case 6:
          if (backoff_pending) {
            backoff_pending = false;
            take(lc.on_backoff_due(generation, t));
          }
          break;
        case 7:
          take(lc.on_deadline());
          break;
        case 8:
          take(lc.on_client_gone());
          break;
        case 9:
          take(lc.on_drain());
          break;
        default:
          if (backoff_pending) take(lc.on_backoff_due(generation + 1, t));  // a stale timer
          break;
      }
    }
    // Whatever happened, the deadline or the caller ends it, and then the work drains.
    take(lc.on_deadline());
    take(lc.on_client_gone());
    while (!live.empty()) {
      auto a = live.back();
      live.pop_back();
      take(lc.on_attempt_exited(a, t));
    }
    while (connections_open > 0) {
      --connections_open;
      take(lc.on_connection_ended());
    }
    EXPECT_EQ(answers, 1) << "round " << round;
    EXPECT_EQ(finishes, 1) << "round " << round;
    EXPECT_TRUE(lc.answered());
  }
  expect_nothing_held();
}

// ---- upstream health ----------------------------------------------------------------------

class RequestLifecycleHealthTest : public RequestLifecycleTest {
 protected:
  RequestLifecycleHealthTest() {
    for (auto& u : cfg_.upstreams) u.eject_after_failures = 2;
    health_.configure(cfg_);
  }
  // One request for llama that fails its first attempt with `status` and is then let go.
  void one_failing_request(int status, std::optional<millis> retry_after = std::nullopt) {
    auto lc = make(10s);
    lc.start(t0_);
    lc.on_response(status, retry_after, t0_ + 1ms);
    lc.on_client_gone();
  }
};

TEST_F(RequestLifecycleHealthTest, FailuresInARowEjectTheUpstreamAndTheChainMovesOnAtOnce) {
  one_failing_request(503);
  EXPECT_TRUE(health_.available(0, t0_ + 2ms));
  one_failing_request(502);
  EXPECT_FALSE(health_.available(0, t0_ + 2ms));
  // llama's only deployment is out: its fallback is tried at once, no attempt spent on a.
  auto lc = make(10s);
  const auto& cs = lc.start(t0_ + 2ms);
  const auto* c = find(cs, kind::start_attempt);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(routes_.at(c->deployment).model, "small");
  EXPECT_EQ(c->upstream, 1U);
  EXPECT_EQ(lc.model(), "small");
}

TEST_F(RequestLifecycleHealthTest, AResponseOfTheCallersOwnFaultBreaksTheStreak) {
  one_failing_request(503);
  one_failing_request(400);  // 4xx: the upstream works
  one_failing_request(503);
  EXPECT_TRUE(health_.available(0, t0_ + 2ms));
}

TEST_F(RequestLifecycleHealthTest, TheCallerLeavingOrTheDeadlineCountsNothingAgainstTheUpstream) {
  for (int i = 0; i < 3; ++i) {
    auto lc = make(10s);
    lc.start(t0_);
    if (i % 2 == 0) {
      lc.on_client_gone();
    } else {
      lc.on_deadline();
    }
  }
  EXPECT_TRUE(health_.available(0, t0_ + 1ms));
}

TEST_F(RequestLifecycleHealthTest, AttemptTimeoutsAndResetsCountTheGatewaysOwnRefusalsDoNot) {
  auto fail_with = [&](attempt_end end) {
    auto lc = make(10s);
    lc.start(t0_);
    lc.on_attempt_failed(end, "x", false, t0_ + 1ms);
    lc.on_client_gone();
  };
  fail_with(attempt_end::overloaded);
  fail_with(attempt_end::too_large);
  fail_with(attempt_end::overloaded);
  EXPECT_TRUE(health_.available(0, t0_ + 2ms));
  fail_with(attempt_end::timeout);
  fail_with(attempt_end::reset);
  EXPECT_FALSE(health_.available(0, t0_ + 2ms));
}

TEST_F(RequestLifecycleHealthTest, A429WithRetryAfterCoolsTheUpstreamDownForThatLong) {
  one_failing_request(429);  // no Retry-After: nothing to go by
  EXPECT_TRUE(health_.available(0, t0_ + 2ms));
  one_failing_request(429, 2000ms);
  EXPECT_FALSE(health_.available(0, t0_ + 1500ms));
  EXPECT_TRUE(health_.available(0, t0_ + 2001ms));
}

TEST_F(RequestLifecycleHealthTest, WithEveryDeploymentOutTheOneBackSoonestIsTriedAnyway) {
  health_.check_failed(1, t0_);  // small's upstream: out until a check passes
  one_failing_request(503);
  one_failing_request(503);  // a: out for 5 s
  auto lc = make(10s);
  const auto* c = find(lc.start(t0_ + 2ms), kind::start_attempt);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->upstream, 0U);  // a's ejection ends; b's check may never pass
  EXPECT_EQ(lc.model(), "llama");
}

// previous_response_id (issue 28): "llama" on upstreams a and b; a request continuing a
// response b made goes to b whatever the draws, its retry too; with b ejected, as usual.
// Every deployment of a model out and no fallback: the attempts spread over them all, and a
// retry goes to one not tried, so one dead deployment cannot take every try.
TEST(RequestLifecycleEveryDeploymentOutTest, AttemptsSpreadAndARetryGoesToTheOtherDeployment) {
  auto cfg = two_models();
  cfg.models[0].fallbacks.clear();
  auto on_b = cfg.models[0];
  on_b.upstream = "b";
  cfg.models.push_back(on_b);
  for (auto& u : cfg.upstreams) u.eject_after_failures = 1;
  cfg.upstreams[0].eject_base = 1000ms;  // a comes back first
  router routes{cfg};
  retry_budget retries{cfg.upstreams.size(), 100, 100};
  upstream_health health;
  health.configure(cfg);
  const auto t0 = steady_time{} + 1000s;
  health.attempt_failed(0, t0);
  health.attempt_failed(1, t0);
  std::mt19937_64 gen{11};
  std::array<int, 2> first_on{0, 0};
  for (int i = 0; i < 40; ++i) {
    request_lifecycle lc{cfg,
                         routes,
                         retries,
                         health,
                         routes.chain_of("llama"),
                         surface::chat,
                         request_deadline{t0, 10s},
                         [](std::int64_t) { return 1; },
                         [&gen] { return gen(); }};
    const auto* first = find(lc.start(t0 + 1ms), kind::start_attempt);
    ASSERT_NE(first, nullptr);
    ++first_on.at(first->upstream);
    const auto* backoff =
        find(lc.on_attempt_failed(attempt_end::connect_failed, "refused", false, t0 + 2ms),
             kind::arm_backoff);
    ASSERT_NE(backoff, nullptr) << i;
    const auto* retry = find(lc.on_backoff_due(backoff->generation, t0 + 3ms), kind::start_attempt);
    ASSERT_NE(retry, nullptr);
    EXPECT_NE(retry->upstream, first->upstream) << i;
    lc.on_response(200, std::nullopt, t0 + 4ms);
    ASSERT_FALSE(health.available(0, t0 + 5ms));  // the answers came while both were out
  }
  EXPECT_GT(first_on[0], 0);
  EXPECT_GT(first_on[1], 0);
}

TEST(RequestLifecycleAffinityTest, APreferredUpstreamTakesEveryAttemptWhileInService) {
  auto cfg = two_models();
  auto on_b = cfg.models[0];
  on_b.upstream = "b";
  cfg.models.push_back(on_b);
  router routes{cfg};
  retry_budget retries{cfg.upstreams.size(), 3, 20};
  upstream_health health;
  health.configure(cfg);
  const auto t0 = steady_time{} + 1000s;
  std::uint64_t draw = 0;
  auto make = [&] {
    return request_lifecycle{cfg,
                             routes,
                             retries,
                             health,
                             routes.chain_of("llama"),
                             surface::responses,
                             request_deadline{t0, 10s},
                             [](std::int64_t n) { return n; },
                             [&draw] { return draw++ * 0x9e3779b97f4a7c15ULL; }};
  };
  for (int i = 0; i < 16; ++i) {
    auto lc = make();
    lc.prefer_upstream(1);
    const auto* first = find(lc.start(t0), kind::start_attempt);
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(first->upstream, 1U) << i;
    EXPECT_EQ(routes.at(first->deployment).model, "llama");
    // The retry goes back to b, not to the untried a.
    const auto* backoff =
        find(lc.on_attempt_failed(attempt_end::timeout, "attempt timed out", false, t0),
             kind::arm_backoff);
    ASSERT_NE(backoff, nullptr);
    const auto* retry = find(lc.on_backoff_due(backoff->generation, t0), kind::start_attempt);
    ASSERT_NE(retry, nullptr);
    EXPECT_EQ(retry->upstream, 1U) << i;
    // The retry answers: b's run of failures ends (five in a row would eject it, below).
    lc.on_response(200, std::nullopt, t0);
  }
  // b ejected: the request is routed as usual, to a.
  for (std::uint32_t f = 0; f < cfg.upstreams[1].eject_after_failures; ++f)
    health.attempt_failed(1, t0);
  ASSERT_FALSE(health.available(1, t0 + 1ms));
  auto lc = make();
  lc.prefer_upstream(1);
  const auto* first = find(lc.start(t0 + 1ms), kind::start_attempt);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->upstream, 0U);
}

}  // namespace
}  // namespace tether

namespace tether {
namespace {

// A key with a rate limit: no attempt before the budget's verdict (await_admission).
class RequestLifecycleAdmissionTest : public RequestLifecycleTest {};

TEST_F(RequestLifecycleAdmissionTest, NoAttemptStartsBeforeTheVerdictAndAnAdmittedOneStartsIt) {
  auto lc = make(10s);
  lc.await_admission();
  ASSERT_EQ(kinds(lc.start(t0_)), (std::vector{kind::arm_deadline, kind::check_admission}));
  EXPECT_TRUE(lc.admitting());
  const auto& cs = lc.on_admission(true, outcome::rate_limited, {}, std::nullopt, t0_ + 1ms);
  ASSERT_EQ(kinds(cs), (std::vector{kind::start_attempt}));
  EXPECT_FALSE(lc.admitting());
  // A second verdict changes nothing.
  EXPECT_TRUE(lc.on_admission(false, outcome::rate_limited, "x", 1s, t0_ + 2ms).empty());
}

TEST_F(RequestLifecycleAdmissionTest, ARefusalIsAnswered429WithItsRetryAfterAndNoAttempt) {
  auto lc = make(10s);
  lc.await_admission();
  lc.start(t0_);
  const auto& cs = lc.on_admission(false, outcome::rate_limited,
                                   "the key's rpm (5 requests per minute) is "
                                   "used up",
                                   30s, t0_ + 1ms);
  ASSERT_EQ(kinds(cs), (std::vector{kind::send_error, kind::caller_side_over, kind::finish}));
  EXPECT_EQ(cs[0].result, outcome::rate_limited);
  EXPECT_EQ(cs[0].status, 429);
  EXPECT_EQ(cs[0].retry_after, 30s);
  EXPECT_EQ(lc.attempts_started(), 0U);
  expect_nothing_held();
}

TEST_F(RequestLifecycleAdmissionTest, TheDeadlineOrTheCallerLeavingWhileAdmittingEndsItAtOnce) {
  {
    auto lc = make(10s);
    lc.await_admission();
    lc.start(t0_);
    const auto& cs = lc.on_deadline();
    ASSERT_NE(find(cs, kind::send_error), nullptr);
    EXPECT_EQ(find(cs, kind::send_error)->result, outcome::deadline_exceeded);
    EXPECT_NE(find(cs, kind::finish), nullptr);
    // The verdict arriving after it starts nothing.
    EXPECT_TRUE(lc.on_admission(true, outcome::rate_limited, {}, std::nullopt, t0_ + 11s).empty());
  }
  auto lc = make(10s);
  lc.await_admission();
  lc.start(t0_);
  const auto& cs = lc.on_client_gone();
  EXPECT_EQ(find(cs, kind::cancel_attempt), nullptr);
  EXPECT_NE(find(cs, kind::finish), nullptr);
  EXPECT_EQ(lc.result(), outcome::client_disconnected);
  expect_nothing_held();
}

}  // namespace
}  // namespace tether
