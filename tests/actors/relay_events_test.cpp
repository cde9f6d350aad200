// relay_events alone: what the attempt actor and the connection actor hear from net/'s callbacks,
// and when the exchange is cancelled for a body over max_response_bytes.
#include "actors/relay_events.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "actors/messages.hpp"

namespace tether {
namespace {

using namespace std::chrono_literals;

class counting_exchange final : public net::upstream_exchange {
 public:
  void cancel() override { ++cancels; }
  int cancels = 0;
};

const net::header_list json_head{{"content-type", "application/json"}};
const net::header_list sse_head{{"content-type", "text/event-stream; charset=utf-8"}};

class RelayEventsTest : public ::testing::Test {
 protected:
  RelayEventsTest() : system_(cfg_), attempt_(system_), owner_(system_) {}

  // As for a caller who asked for a stream, unless `stream` says otherwise.
  std::shared_ptr<relay_events> relay(std::uint64_t max_body = 0, bool stream = true) {
    return std::make_shared<relay_events>(caf::actor{owner_}, caf::actor{attempt_}, stream,
                                          max_body);
  }

  // What the attempt heard, in order, until nothing more came for `quiet`.
  std::vector<std::string> heard(std::chrono::milliseconds quiet = 100ms) {
    std::vector<std::string> out;
    bool more = true;
    while (more) {
      attempt_->receive([&](up_head_atom, int status,
                            net::header_list&) { out.push_back("head " + std::to_string(status)); },
                        [&](up_body_atom, std::string& bytes) { out.push_back("body " + bytes); },
                        [&](up_end_atom) { out.emplace_back("end"); },
                        [&](up_whole_atom, int status, net::header_list&, std::string& body) {
                          out.push_back("whole " + std::to_string(status) + " " + body);
                        },
                        [&](up_fail_atom, std::int32_t kind, std::string&) {
                          out.push_back("fail " + std::to_string(kind));
                        },
                        caf::after(quiet) >> [&] { more = false; });
    }
    return out;
  }

  caf::actor_system_config cfg_;
  caf::actor_system system_;
  caf::scoped_actor attempt_;
  caf::scoped_actor owner_;
};

using lines = std::vector<std::string>;

TEST_F(RelayEventsTest, AResponseThatIsNotAStreamArrivesAsOneMessage) {
  auto r = relay();
  r->on_connected(false);
  r->on_head(200, json_head);
  r->on_body("ab");
  r->on_body("cd");
  r->on_end();
  EXPECT_EQ(heard(), (lines{"whole 200 abcd"}));
}

TEST_F(RelayEventsTest, AnEmptyBodyAndAFailureBeforeTheEndAreRelayedAlike) {
  auto empty = relay();
  empty->on_head(204, {});
  empty->on_end();
  EXPECT_EQ(heard(), (lines{"whole 204 "}));
  auto broken = relay();
  broken->on_head(200, json_head);
  broken->on_body("partial");
  broken->on_failure(net::upstream_failure::reset, "connection reset");
  EXPECT_EQ(heard(),
            (lines{"fail " + std::to_string(static_cast<int>(net::upstream_failure::reset))}));
}

TEST_F(RelayEventsTest, AnEventStreamIsPassedOnAsItComes) {
  auto r = relay();
  r->on_head(200, sse_head);
  EXPECT_EQ(heard(), (lines{"head 200"}));  // before any body: nothing is held back
  r->on_body("data: 1\n\n");
  EXPECT_EQ(heard(), (lines{"body data: 1\n\n"}));
  r->on_body("data: 2\n\n");
  r->on_end();
  EXPECT_EQ(heard(), (lines{"body data: 2\n\n", "end"}));
}

TEST_F(RelayEventsTest, ABodyBeyondTheHoldLimitIsPassedOnAsItComes) {
  auto r = relay();
  const std::string forty_k(40 * 1024, 'x');
  r->on_head(200, json_head);
  r->on_body(forty_k);
  EXPECT_TRUE(heard(50ms).empty());  // held
  r->on_body(forty_k);               // 80 KiB > 64 KiB: head and all so far go on
  r->on_body(forty_k);
  r->on_end();
  EXPECT_EQ(heard(), (lines{"head 200", "body " + forty_k + forty_k, "body " + forty_k, "end"}));
}

TEST_F(RelayEventsTest, ABodyOverTheLimitCancelsTheExchangeAtOnce) {
  auto r = relay(100);
  auto exchange = std::make_shared<counting_exchange>();
  r->attach(exchange);
  r->on_head(200, json_head);
  r->on_body(std::string(60, 'a'));
  EXPECT_EQ(exchange->cancels, 0);
  r->on_body(std::string(60, 'b'));  // 120 > 100
  EXPECT_EQ(exchange->cancels, 1);   // here, on the calling (io) thread, not via an actor
  r->on_body(std::string(60, 'c'));  // what was already in flight is dropped
  r->on_end();
  EXPECT_EQ(heard(), (lines{"fail " + std::to_string(up_fail_too_large)}));
  EXPECT_EQ(exchange->cancels, 1);
}

TEST_F(RelayEventsTest, ALimitPassedBeforeTheExchangeIsKnownCancelsItAsItIsAttached) {
  auto r = relay(10);
  r->on_head(200, json_head);
  r->on_body(std::string(11, 'a'));
  auto exchange = std::make_shared<counting_exchange>();
  r->attach(exchange);
  EXPECT_EQ(exchange->cancels, 1);
  EXPECT_EQ(heard(), (lines{"fail " + std::to_string(up_fail_too_large)}));
}

TEST_F(RelayEventsTest, AnEventStreamIsNotHeldToTheLimit) {
  auto r = relay(10);
  auto exchange = std::make_shared<counting_exchange>();
  r->attach(exchange);
  r->on_head(200, sse_head);
  const std::string event = "data: " + std::string(100, 'z') + "\n\n";
  r->on_body(event);
  r->on_end();
  EXPECT_EQ(heard(), (lines{"head 200", "body " + event, "end"}));
  EXPECT_EQ(exchange->cancels, 0);
}

// Relayed whole, so held and limited like any body: an event stream the caller did not ask for,
// and an error answered as an event stream.
TEST_F(RelayEventsTest, AnEventStreamThatIsNotRelayedAsOneIsHeldAndLimited) {
  const std::string event = "data: " + std::string(100, 'z') + "\n\n";
  auto unasked = relay(10, false);
  unasked->on_head(200, sse_head);
  unasked->on_body(event);
  EXPECT_EQ(heard(), (lines{"fail " + std::to_string(up_fail_too_large)}));
  auto error = relay(0, true);
  error->on_head(503, sse_head);
  error->on_body(event);
  error->on_end();
  EXPECT_EQ(heard(), (lines{"whole 503 " + event}));
}

// With the moment the head arrived: the access line's head_ms, which says whether a request was
// still waiting for its answer or already reading it.
TEST_F(RelayEventsTest, TheSocketsEndGoesToTheConnectionActorWithTheHeadsMoment) {
  auto r = relay();
  const auto before = now_ns();
  r->on_head(200, json_head);
  const auto after = now_ns();
  r->on_end();
  r->on_closed();
  std::int64_t closed_ns = 0;
  std::int64_t head_ns = 0;
  owner_->receive(
      [&](up_closed_atom, std::int64_t at, std::int64_t head, bool) {
        closed_ns = at;
        head_ns = head;
      },
      caf::after(2s) >> [] {});
  EXPECT_GE(closed_ns, after);
  EXPECT_GE(head_ns, before);
  EXPECT_LE(head_ns, after);
  EXPECT_EQ(heard(), (lines{"whole 200 "}));
}

TEST_F(RelayEventsTest, AnExchangeWithNoHeadClosesWithNone) {
  auto r = relay();
  r->on_failure(net::upstream_failure::reset, "reset");
  r->on_closed();
  std::int64_t head_ns = -1;
  owner_->receive([&](up_closed_atom, std::int64_t, std::int64_t head, bool) { head_ns = head; },
                  caf::after(2s) >> [] {});
  EXPECT_EQ(head_ns, 0);
  EXPECT_EQ(heard(),
            (lines{"fail " + std::to_string(static_cast<int>(net::upstream_failure::reset))}));
}

// The close says whether tether cut an exchange the engine may still be working on (the release
// grace's condition): the request went out and the answer neither ended nor failed.
TEST_F(RelayEventsTest, TheCloseSaysWhetherTheExchangeWasCutAfterTheRequestWentOut) {
  auto cut_of = [&](auto play) {
    auto r = relay();
    play(*r);
    r->on_closed();
    std::optional<bool> cut;
    owner_->receive([&](up_closed_atom, std::int64_t, std::int64_t, bool c) { cut = c; },
                    caf::after(2s) >> [] {});
    heard(10ms);
    return cut;
  };
  EXPECT_EQ(cut_of([](relay_events& r) {
              r.on_connected(false);
              r.on_head(200, sse_head);
              r.on_body("data: {}\n\n");
            }),
            true);                                                         // cancelled mid-stream
  EXPECT_EQ(cut_of([](relay_events& r) { r.on_connected(true); }), true);  // before the head
  EXPECT_EQ(cut_of([](relay_events& r) {
              r.on_connected(false);
              r.on_head(200, sse_head);
              r.on_end();
            }),
            false);  // the answer ended
  EXPECT_EQ(cut_of([](relay_events& r) {
              r.on_connected(false);
              r.on_failure(net::upstream_failure::reset, "reset");
            }),
            false);                                // the upstream ended it
  EXPECT_EQ(cut_of([](relay_events&) {}), false);  // cancelled while connecting
}

}  // namespace
}  // namespace tether
