// The call table and the call ids it keys (docs/contract.md, "One call, one budget"): which
// requests are tries of one call, and what a retry is left of the call's deadline and attempts.
#include "actors/policy/request/call_table.hpp"

#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "actors/policy/request/call_identity.hpp"
#include "actors/policy/wire/model_request.hpp"

namespace tether {
namespace {

using namespace std::chrono_literals;
using config::call_identity_mode;

const steady_time t0{std::chrono::hours(1)};
constexpr millis window{120000};

const std::string chat =
    R"({"model":"m","stream":false,"messages":[{"role":"user","content":"hello"}]})";

// The call id of a request as the gateway computes it: its headers read, its body inspected
// (fingerprinted when the id needs it), on key 0 unless told.
std::optional<std::uint64_t> id_of(std::string_view body, const net::header_list& headers,
                                   call_identity_mode mode = call_identity_mode::session,
                                   std::int64_t key = 0, surface where = surface::chat) {
  const auto h = read_call_headers(headers);
  const bool fingerprint = needs_body_fingerprint(h, mode == call_identity_mode::session,
                                                  mode == call_identity_mode::body);
  auto inspected = inspect_model_request(body, 128, fingerprint);
  EXPECT_TRUE(std::holds_alternative<model_request_info>(inspected)) << body;
  const auto& info = std::get<model_request_info>(inspected);
  return call_id_of(mode, {key, ""}, where, info.model, h, info.body_fingerprint);
}

const net::header_list claude = {
    {"x-claude-code-session-id", "0b5c7c1e-2f4e-4a43-9c8b-1d2e3f4a5b6c"}};

TEST(CallTableTest, ARetryOfAFailedCallKeepsTheFirstTrysDeadline) {
  call_table calls{16};
  const auto id = id_of(chat, claude);
  ASSERT_TRUE(id);
  auto first = calls.admit(*id, t0);
  EXPECT_EQ(first.try_number, 1U);
  EXPECT_FALSE(first.retry());
  // The first try, deadline 30 s, failed after 20 s.
  calls.ended(*id, false, t0 + 30s, first.try_number, t0 + 20s, window);
  auto second = calls.admit(*id_of(chat, claude), t0 + 21s);
  EXPECT_TRUE(second.retry());
  EXPECT_EQ(second.try_number, 2U);
  ASSERT_TRUE(second.due);
  EXPECT_EQ(*second.due, t0 + 30s) << "the retry is left 9 s, not a fresh 30 s";
  calls.ended(*id, false, *second.due, second.try_number, t0 + 30s, window);
  auto third = calls.admit(*id, t0 + 31s);
  EXPECT_EQ(third.try_number, 3U);
  EXPECT_EQ(third.due, t0 + 30s) << "nothing left: the gateway answers 504 at once";
}

TEST(CallTableTest, AnOkEndsTheCallTheSameBodyAgainIsANewCall) {
  call_table calls{16};
  const auto id = *id_of(chat, claude);
  calls.ended(id, false, t0 + 30s, 1, t0 + 1s, window);
  auto retry = calls.admit(id, t0 + 2s);
  ASSERT_TRUE(retry.retry());
  calls.ended(id, true, retry.due, retry.try_number, t0 + 3s, window);
  auto again = calls.admit(id, t0 + 4s);
  EXPECT_FALSE(again.retry()) << "the call ended ok";
  EXPECT_FALSE(again.due);
  EXPECT_EQ(calls.size(), 0U);
}

TEST(CallTableTest, ADifferentBodyIsAnotherCallAStreamFlippedIsTheSame) {
  const auto id = id_of(chat, claude);
  ASSERT_TRUE(id);
  // Claude Code re-sends a cut stream without streaming; other clients drop stream_options.
  EXPECT_EQ(id_of(R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]})",
                  claude),
            id);
  EXPECT_EQ(id_of(R"({"model":"m","messages":[{"role":"user","content":"hello"}]})", claude), id);
  EXPECT_EQ(id_of(R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}],)"
                  R"("stream_options":{"include_usage":true}})",
                  claude),
            id);
  // Anything else that differs is a different call.
  EXPECT_NE(id_of(R"({"model":"m","stream":false,"messages":[{"role":"user","content":"hellO"}]})",
                  claude),
            id);
  EXPECT_NE(id_of(R"({"model":"m","stream":false,"messages":[{"role":"user","content":"hello"}],)"
                  R"("max_tokens":5})",
                  claude),
            id);
  EXPECT_NE(id_of(R"({"model":"n","stream":false,"messages":[{"role":"user","content":"hello"}]})",
                  claude),
            id);
  // A member named stream below the top level is the body's, not the request's flag.
  EXPECT_NE(id_of(R"({"model":"m","stream":false,"messages":[{"role":"user","content":"hello",)"
                  R"("stream":true}]})",
                  claude),
            id);
  // The same body from another session, key or surface is another call.
  EXPECT_NE(id_of(chat, {{"x-claude-code-session-id", "another-session"}}), id);
  EXPECT_NE(id_of(chat, claude, call_identity_mode::session, 1), id);
  EXPECT_NE(id_of(chat, claude, call_identity_mode::session, 0, surface::responses), id);

  call_table calls{16};
  calls.ended(*id, false, t0 + 30s, 1, t0 + 1s, window);
  EXPECT_FALSE(
      calls
          .admit(*id_of(R"({"model":"m","messages":[{"role":"user","content":"bye"}]})", claude),
                 t0 + 2s)
          .retry());
  EXPECT_TRUE(calls
                  .admit(*id_of(R"({"model":"m","stream":true,"messages":[{"role":"user",)"
                                R"("content":"hello"}]})",
                                claude),
                         t0 + 2s)
                  .retry());
}

TEST(CallTableTest, PastTheWindowTheSameCallIsNewAgain) {
  call_table calls{16};
  const auto id = *id_of(chat, claude);
  calls.ended(id, false, t0 + 30s, 1, t0 + 10s, window);
  EXPECT_TRUE(calls.admit(id, t0 + 10s + window).retry()) << "the window's last moment";
  calls.ended(id, false, t0 + 30s, 2, t0 + 10s, window);
  auto late = calls.admit(id, t0 + 10s + window + 1ms);
  EXPECT_FALSE(late.retry());
  EXPECT_EQ(calls.size(), 0U) << "a closed window's entry goes";
  // A window of 0 (call_window_ms = 0) keeps nothing.
  calls.ended(id, false, t0 + 30s, 1, t0, millis{0});
  EXPECT_FALSE(calls.admit(id, t0).retry());
}

TEST(CallTableTest, AFloodOfDistinctFailingCallsEvictsTheOldestAndCountsIt) {
  constexpr std::size_t capacity = 64;
  call_table calls{capacity};
  const auto first = *id_of(chat, claude);
  calls.ended(first, false, t0 + 30s, 1, t0, window);
  std::uint64_t evicted = 0;
  for (int i = 0; i < 10000; ++i) {
    const auto body =
        R"({"model":"m","messages":[{"role":"user","content":"q)" + std::to_string(i) + R"("}]})";
    const auto id = *id_of(body, claude);
    ASSERT_FALSE(calls.admit(id, t0 + 1ms).retry());
    evicted += calls.ended(id, false, t0 + 30s, 1, t0 + 1ms, window);
    ASSERT_LE(calls.size(), capacity);
  }
  EXPECT_EQ(calls.size(), capacity);
  EXPECT_EQ(evicted, 10000U + 1 - capacity);
  EXPECT_EQ(calls.evictions(), evicted);
  EXPECT_FALSE(calls.admit(first, t0 + 2ms).retry()) << "the oldest went first";
  // An entry whose window had closed is not counted when it goes.
  call_table lapsing{1};
  lapsing.ended(1, false, t0 + 30s, 1, t0, window);
  EXPECT_EQ(lapsing.ended(2, false, t0 + 30s, 1, t0 + window + 1s, window), 0U);
  EXPECT_EQ(lapsing.evictions(), 0U);
  // A shrunk capacity drops the oldest at once.
  calls.set_capacity(4);
  EXPECT_EQ(calls.size(), 4U);
}

TEST(CallTableTest, AnIdempotencyKeyTiesTriesWhoseBodiesDiffer) {
  const net::header_list key_a = {{"idempotency-key", "call-a"}};
  const auto id = id_of(chat, key_a);
  ASSERT_TRUE(id) << "an Idempotency-Key names a call without a session";
  EXPECT_EQ(id_of(R"({"model":"m","messages":[{"role":"user","content":"other"}]})", key_a), id);
  EXPECT_NE(id_of(chat, {{"idempotency-key", "call-b"}}), id);
  // It wins over the session, and holds with call_identity = "body" too.
  EXPECT_EQ(id_of(chat, {{"x-claude-code-session-id", "s"}, {"idempotency-key", "call-a"}}), id);
  EXPECT_EQ(id_of(chat, key_a, call_identity_mode::body), id);
  EXPECT_FALSE(id_of(chat, key_a, call_identity_mode::off));

  call_table calls{16};
  calls.ended(*id, false, t0 + 30s, 1, t0 + 1s, window);
  auto retry = calls.admit(*id_of(R"({"model":"m","input":"edited"})", key_a), t0 + 2s);
  EXPECT_TRUE(retry.retry());
  EXPECT_EQ(retry.due, t0 + 30s);
}

TEST(CallTableTest, IdenticalBodiesWithoutASessionAreSeparateCallsByDefault) {
  // A batch or evaluation job sends the same body many times on purpose.
  EXPECT_FALSE(id_of(chat, {}));
  EXPECT_FALSE(id_of(chat, {{"user-agent", "batch/1.0"}, {"x-request-id", "a"}}));
  // A session header that is not a sane id names nothing (it is not logged either).
  EXPECT_FALSE(id_of(chat, {{"session-id", "has spaces"}}));
}

TEST(CallTableTest, CallIdentityBodyTellsACallByItsBodyAlone) {
  const auto id = id_of(chat, {}, call_identity_mode::body);
  ASSERT_TRUE(id) << "call_identity = \"body\": the key and the body name the call";
  EXPECT_EQ(id_of(R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]})",
                  {}, call_identity_mode::body),
            id);
  EXPECT_EQ(id_of(chat, claude, call_identity_mode::body), id) << "a session does not split it";
  EXPECT_NE(id_of(chat, {}, call_identity_mode::body, 1), id) << "another key";
  EXPECT_NE(id_of(R"({"model":"m","messages":[]})", {}, call_identity_mode::body), id);
  EXPECT_FALSE(id_of(chat, claude, call_identity_mode::off));
}

TEST(CallTableTest, TheCallKeepsTheEarlierDeadlineAndTheHigherCount) {
  call_table calls{16};
  // Two tries of one call were in flight together; the one that ends second had the later due.
  calls.ended(7, false, t0 + 30s, 2, t0 + 5s, window);
  calls.ended(7, false, t0 + 40s, 1, t0 + 6s, window);
  auto next = calls.admit(7, t0 + 7s);
  EXPECT_EQ(next.try_number, 3U);
  EXPECT_EQ(next.due, t0 + 30s);
  // An unbounded call (no deadline) has no due; a bounded try of it gives it one.
  calls.ended(8, false, std::nullopt, 1, t0, window);
  EXPECT_FALSE(calls.admit(8, t0 + 1s).due);
  calls.ended(8, false, t0 + 9s, 2, t0 + 1s, window);
  EXPECT_EQ(calls.admit(8, t0 + 2s).due, t0 + 9s);
}

TEST(CallTableTest, TheSessionIsTheFirstPresentOfTheThreeHeaders) {
  const auto session_of = [](const net::header_list& headers) {
    const auto* s = read_call_headers(headers).session;
    return s ? *s : std::string("<none>");
  };
  EXPECT_EQ(
      session_of(
          {{"x-client-request-id", "c"}, {"session-id", "b"}, {"x-claude-code-session-id", "a"}}),
      "a");
  EXPECT_EQ(session_of({{"x-client-request-id", "c"}, {"session-id", "b"}}), "b");
  EXPECT_EQ(session_of({{"x-client-request-id", "c"}}), "c");
  EXPECT_EQ(session_of({{"x-request-id", "r"}}), "<none>");
  EXPECT_EQ(session_of({{"session-id", std::string(129, 'a')}}), "<none>") << "bounded";
  EXPECT_EQ(session_of({{"session-id", std::string(128, 'a')}}), std::string(128, 'a'));
  // The first present decides, even when it is not sane: a later header does not stand in.
  EXPECT_EQ(session_of({{"x-claude-code-session-id", "a\"b"}, {"session-id", "b"}}), "<none>");
  EXPECT_FALSE(read_call_headers({{"idempotency-key", ""}}).idempotency_key) << "empty: none";
}

}  // namespace
}  // namespace tether

namespace tether {
namespace {

using namespace std::chrono_literals;

const steady_time t1{std::chrono::hours(2)};
constexpr millis call_window{120000};
constexpr std::uint32_t max_retries = 2;  // the default: 3 attempts per call

TEST(CallTableAttemptsTest, TheAttemptsOfEachTryAddUpAcrossTheCall) {
  call_table calls{16};
  // The first try spent one attempt before its caller left (the upstream never said no).
  calls.ended(9, false, std::nullopt, 1, t1, call_window, 1, outcome::client_disconnected);
  auto second = calls.admit(9, t1 + 1s);
  EXPECT_EQ(second.attempts, 1U);
  EXPECT_FALSE(second.spent(max_retries)) << "2 attempts are left";
  // The second spent one more, the upstream failed it.
  calls.ended(9, false, std::nullopt, second.try_number, t1 + 2s, call_window, 1,
              outcome::upstream_failed);
  auto third = calls.admit(9, t1 + 3s);
  EXPECT_EQ(third.attempts, 2U) << "the tries' attempts add up";
  EXPECT_FALSE(third.spent(max_retries)) << "1 attempt is left";
  calls.ended(9, false, std::nullopt, third.try_number, t1 + 4s, call_window, 1,
              outcome::upstream_failed);
  auto fourth = calls.admit(9, t1 + 5s);
  EXPECT_EQ(fourth.attempts, 3U);
  EXPECT_EQ(fourth.spent(max_retries), outcome::upstream_failed);
  EXPECT_FALSE(fourth.spent(3)) << "a model allowed 4 attempts has one left";
}

TEST(CallTableAttemptsTest, ACallThatSpentItsAttemptsAtTheUpstreamIsAnsweredWithItsOutcome) {
  call_table calls{16};
  for (const auto o :
       {outcome::upstream_failed, outcome::upstream_timeout, outcome::upstream_rate_limited}) {
    const auto id = static_cast<std::uint64_t>(o) + 100;
    calls.ended(id, false, std::nullopt, 1, t1, call_window, max_retries + 1, o);
    auto retry = calls.admit(id, t1 + 1s);
    ASSERT_TRUE(retry.retry());
    EXPECT_EQ(retry.spent(max_retries), o) << "no attempt: the last try's own answer again";
    // The retry answered at once spent none, and the call stays spent for its window.
    calls.ended(id, false, std::nullopt, retry.try_number, t1 + 1s, call_window, 0, o);
    EXPECT_EQ(calls.admit(id, t1 + 2s).spent(max_retries), o);
    EXPECT_FALSE(calls.admit(id, t1 + 1s + call_window + 1ms).retry())
        << "after the window the same request is a new call with a fresh budget";
  }
  // Spent, but the last try did not end at the upstream: the retry still makes an attempt.
  for (const auto o : {outcome::client_disconnected, outcome::overloaded, outcome::shutting_down,
                       outcome::upstream_rejected, outcome::deadline_exceeded}) {
    calls.ended(200, false, std::nullopt, 1, t1, call_window, max_retries + 1, o);
    EXPECT_FALSE(calls.admit(200, t1 + 1s).spent(max_retries)) << to_string(o);
  }
}

TEST(CallTableAttemptsTest, AnOkEndsTheCallAndItsSpentAttempts) {
  call_table calls{16};
  calls.ended(11, false, std::nullopt, 1, t1, call_window, 2, outcome::upstream_failed);
  auto retry = calls.admit(11, t1 + 1s);
  ASSERT_EQ(retry.attempts, 2U);
  calls.ended(11, true, std::nullopt, retry.try_number, t1 + 2s, call_window, 1, outcome::ok);
  auto again = calls.admit(11, t1 + 3s);
  EXPECT_FALSE(again.retry());
  EXPECT_EQ(again.attempts, 0U) << "the same request after an ok is a new call, a fresh budget";
  EXPECT_FALSE(again.spent(max_retries));
}

}  // namespace
}  // namespace tether
