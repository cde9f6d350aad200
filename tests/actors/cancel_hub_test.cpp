// cancel_hub alone: what the caller's io thread cancels when the caller leaves, and when.
#include "actors/cancel_hub.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace tether {
namespace {

class counting_exchange final : public net::upstream_exchange {
 public:
  void cancel() override { ++cancels; }
  int cancels = 0;
};

TEST(CancelHubTest, CallerLeavingCancelsEveryLiveExchangeOnce) {
  cancel_hub hub;
  auto first = std::make_shared<counting_exchange>();
  auto second = std::make_shared<counting_exchange>();
  EXPECT_TRUE(hub.add(first));
  EXPECT_TRUE(hub.add(second));
  EXPECT_EQ(first->cancels, 0);
  hub.cancel_all();
  hub.cancel_all();  // a second report of the same departure changes nothing
  EXPECT_EQ(first->cancels, 1);
  EXPECT_EQ(second->cancels, 1);
  EXPECT_TRUE(hub.cancelled());
}

// The caller left while the attempt waited for its budget slot: the exchange it starts later is
// cancelled as it is registered.
TEST(CancelHubTest, AnExchangeStartedAfterTheCallerLeftIsCancelledAtOnce) {
  cancel_hub hub;
  hub.cancel_all();
  auto late = std::make_shared<counting_exchange>();
  EXPECT_FALSE(hub.add(late));
  EXPECT_EQ(late->cancels, 1);
}

TEST(CancelHubTest, ExchangesThatAreGoneAreNotKeptAlive) {
  cancel_hub hub;
  auto done = std::make_shared<counting_exchange>();
  std::weak_ptr<counting_exchange> watch = done;
  EXPECT_TRUE(hub.add(done));
  done.reset();  // an earlier attempt's exchange ended
  EXPECT_TRUE(watch.expired());
  auto retry = std::make_shared<counting_exchange>();
  EXPECT_TRUE(hub.add(retry));
  hub.cancel_all();
  EXPECT_EQ(retry->cancels, 1);
}

TEST(CancelHubTest, NothingIsCancelledWhileTheCallerStays) {
  cancel_hub hub;
  auto e = std::make_shared<counting_exchange>();
  EXPECT_TRUE(hub.add(e));
  EXPECT_FALSE(hub.cancelled());
  EXPECT_EQ(e->cancels, 0);
}

// The deadline (io thread) and the request actor race to answer: exactly one of them may.
TEST(CancelHubTest, ExactlyOneClaimToTheAnswerSucceeds) {
  for (int round = 0; round < 200; ++round) {
    cancel_hub hub;
    std::atomic<int> won{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> racers;
    for (int i = 0; i < 4; ++i) {
      racers.emplace_back([&] {
        while (!go.load()) {
        }
        if (hub.claim_answer()) ++won;
      });
    }
    go = true;
    for (auto& t : racers) t.join();
    EXPECT_EQ(won.load(), 1);
    EXPECT_FALSE(hub.claim_answer());
  }
}

}  // namespace
}  // namespace tether
