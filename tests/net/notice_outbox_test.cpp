// The io thread's outbox of reports to the actors: at once by default, held while the thread
// keeps finding more to hold (a storm of expiries), in order, and never past the hold limit.
#include "net/notice_outbox.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "net/io_runtime.hpp"

namespace tether::net {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;
using steady = std::chrono::steady_clock;

class NoticeOutboxTest : public ::testing::Test {
 protected:
  asio::io_context& ctx() { return *static_cast<asio::io_context*>(io_.native()); }
  io_runtime io_{1};
  // Touched only on the io thread until `done` is set.
  std::vector<std::string> log_;
  std::promise<void> done_;
};

TEST_F(NoticeOutboxTest, OffTheIoThreadANoticeRunsAtOnce) {
  int ran = 0;
  post_notice([&] { ++ran; }, notice_timing::when_caught_up);
  EXPECT_EQ(ran, 1);
  post_notice([&] { ++ran; }, notice_timing::now_unless_holding);
  EXPECT_EQ(ran, 2);
}

TEST_F(NoticeOutboxTest, OnTheIoThreadAReportRunsAtOnceWhenNothingIsHeld) {
  std::promise<bool> ran_inline;
  asio::post(ctx(), [&] {
    bool ran = false;
    post_notice([&] { ran = true; }, notice_timing::now_unless_holding);
    ran_inline.set_value(ran);
  });
  auto result = ran_inline.get_future();
  ASSERT_EQ(result.wait_for(2s), std::future_status::ready);
  EXPECT_TRUE(result.get());
}

TEST_F(NoticeOutboxTest, OffTheIoThreadDeferredWorkRunsAtOnce) {
  int ran = 0;
  defer_behind_queued([&] { ++ran; });
  EXPECT_EQ(ran, 1);
}

// Two expiries due in one round: the second's answer goes before the first's deferred work.
// Both handlers are queued from the io thread itself, so both are in the queue before the first
// runs (posted from the test's thread, the first could run before the second was queued).
TEST_F(NoticeOutboxTest, OnTheIoThreadDeferredWorkRunsBehindTheHandlersAlreadyQueued) {
  asio::post(ctx(), [this] {
    asio::post(ctx(), [this] {
      log_.push_back("first answered");
      defer_behind_queued([this] { log_.push_back("first's upstream closed"); });
      log_.push_back("first done");
    });
    asio::post(ctx(), [this] {
      log_.push_back("second answered");
      defer_behind_queued([this] {
        log_.push_back("second's upstream closed");
        done_.set_value();
      });
    });
  });
  auto done = done_.get_future();
  ASSERT_EQ(done.wait_for(2s), std::future_status::ready);
  EXPECT_EQ(log_,
            (std::vector<std::string>{"first answered", "first done", "second answered",
                                      "first's upstream closed", "second's upstream closed"}));
}

// Rounds 0..n-1 stand for the io thread's batches of expiries: each has its successor queued
// before it holds its notice, as the reactor queues a batch of timer completions together.
TEST_F(NoticeOutboxTest, HeldNoticesWaitUntilARoundAddsNoneAndKeepTheirOrder) {
  constexpr int rounds = 6;
  auto round = std::make_shared<std::function<void(int)>>();
  *round = [this, self = std::weak_ptr(round)](int i) {
    log_.push_back("round " + std::to_string(i));
    if (i + 1 < rounds) asio::post(ctx(), [next = self.lock(), i] { (*next)(i + 1); });
    post_notice([this, i] { log_.push_back("held " + std::to_string(i)); },
                notice_timing::when_caught_up);
    if (i == 2) {
      // A report that would go at once waits behind the held ones while they are held.
      post_notice([this] { log_.push_back("report"); }, notice_timing::now_unless_holding);
    }
    if (i == rounds - 1) {
      post_notice([this] { done_.set_value(); }, notice_timing::now_unless_holding);
    }
  };
  asio::post(ctx(), [round] { (*round)(0); });
  auto done = done_.get_future();
  ASSERT_EQ(done.wait_for(2s), std::future_status::ready);
  EXPECT_EQ(log_, (std::vector<std::string>{"round 0", "round 1", "round 2", "round 3", "round 4",
                                            "round 5", "held 0", "held 1", "held 2", "report",
                                            "held 3", "held 4", "held 5"}));
}

// Under load every round closes upstream connections: their reports queue behind a held one
// but do not keep the hold going — the first round that holds nothing new sends them all.
TEST_F(NoticeOutboxTest, ReportsQueuedBehindAHeldNoticeDoNotExtendTheHold) {
  constexpr int rounds = 4;
  auto round = std::make_shared<std::function<void(int)>>();
  *round = [this, self = std::weak_ptr(round)](int i) {
    log_.push_back("round " + std::to_string(i));
    if (i + 1 < rounds) asio::post(ctx(), [next = self.lock(), i] { (*next)(i + 1); });
    if (i == 0) {
      post_notice([this] { log_.push_back("held 0"); }, notice_timing::when_caught_up);
      return;
    }
    post_notice([this, i] { log_.push_back("report " + std::to_string(i)); },
                notice_timing::now_unless_holding);
    if (i == rounds - 1) done_.set_value();
  };
  asio::post(ctx(), [round] { (*round)(0); });
  auto done = done_.get_future();
  ASSERT_EQ(done.wait_for(2s), std::future_status::ready);
  std::promise<void> drained;  // the log is the io thread's until this runs there
  asio::post(ctx(), [&drained] { drained.set_value(); });
  ASSERT_EQ(drained.get_future().wait_for(2s), std::future_status::ready);
  EXPECT_EQ(log_, (std::vector<std::string>{"round 0", "round 1", "held 0", "report 1", "round 2",
                                            "report 2", "round 3", "report 3"}));
}

TEST_F(NoticeOutboxTest, HeldNoticesGoAheadAtTheHoldLimitWhileTheRoundsGoOn) {
  // Shared with the io thread's handlers, which may outlive this test's body.
  struct storm {
    bool stop = false;
    int rounds = 0;
    int rounds_when_sent = -1;
    steady::time_point first_held{};
    steady::time_point sent_at{};
    std::promise<void> sent;
  };
  auto st = std::make_shared<storm>();
  auto round = std::make_shared<std::function<void()>>();
  *round = [this, st, self = std::weak_ptr(round)] {
    if (st->stop) return;
    ++st->rounds;
    asio::post(ctx(), [next = self.lock()] { (*next)(); });
    if (st->first_held == steady::time_point{}) st->first_held = steady::now();
    post_notice(
        [st] {
          if (st->rounds_when_sent >= 0) return;
          st->rounds_when_sent = st->rounds;
          st->sent_at = steady::now();
          st->sent.set_value();
        },
        notice_timing::when_caught_up);
  };
  auto sent = st->sent.get_future();
  asio::post(ctx(), [round] { (*round)(); });
  ASSERT_EQ(sent.wait_for(2s), std::future_status::ready);
  std::promise<int> stopped;
  asio::post(ctx(), [st, &stopped] {
    st->stop = true;
    stopped.set_value(st->rounds);
  });
  auto rounds_at_stop = stopped.get_future();
  ASSERT_EQ(rounds_at_stop.wait_for(2s), std::future_status::ready);
  EXPECT_GE(st->sent_at - st->first_held, notice_hold_limit);
  EXPECT_LT(st->sent_at - st->first_held, notice_hold_limit + 1s);
  // Sent while the rounds were still adding notices, not after they stopped.
  EXPECT_GT(st->rounds_when_sent, 1);
  EXPECT_GT(rounds_at_stop.get(), st->rounds_when_sent);
}

}  // namespace
}  // namespace tether::net
