// The io_context's one timer heap: order, cancellation from any thread, an earlier timer moving
// the single wake-up, and callbacks posted to a given strand.
#include "net/timer_heap.hpp"

#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "net/io_runtime.hpp"

namespace tether::net {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
namespace asio = boost::asio;

// Records which timers fired, when, in order; waits (bounded) for a count.
class firings {
 public:
  void add(int id) {
    std::lock_guard lock(mutex_);
    order_.push_back(id);
    at_.push_back(steady::now());
    changed_.notify_all();
  }
  bool wait_for(std::size_t n, std::chrono::milliseconds timeout = 2000ms) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return order_.size() >= n; });
  }
  std::vector<int> order() {
    std::lock_guard lock(mutex_);
    return order_;
  }
  steady::time_point at(std::size_t i) {
    std::lock_guard lock(mutex_);
    return at_.at(i);
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<int> order_;
  std::vector<steady::time_point> at_;
};

class TimerHeapTest : public ::testing::Test {
 protected:
  asio::io_context& ctx() { return *static_cast<asio::io_context*>(io_.native()); }
  timer_heap& heap() { return timer_heap::of(ctx()); }
  io_runtime io_;
};

TEST_F(TimerHeapTest, TimersFireInTheirOrderAndNeverEarly) {
  firings f;
  const auto t0 = steady::now();
  std::vector<std::shared_ptr<timer>> handles;
  for (int ms : {60, 20, 40, 20}) {
    handles.push_back(heap().start(t0 + std::chrono::milliseconds(ms), [&f, ms] { f.add(ms); }));
  }
  ASSERT_TRUE(f.wait_for(4));
  EXPECT_EQ(f.order(), (std::vector<int>{20, 20, 40, 60}));
  EXPECT_GE(f.at(0), t0 + 20ms);
  EXPECT_GE(f.at(2), t0 + 40ms);
  EXPECT_GE(f.at(3), t0 + 60ms);
  EXPECT_EQ(heap().size(), 0u);
}

TEST_F(TimerHeapTest, AnEarlierTimerMovesTheWakeUp) {
  firings f;
  const auto t0 = steady::now();
  auto late = heap().start(t0 + 5s, [&f] { f.add(1); });
  auto soon = heap().start(t0 + 20ms, [&f] { f.add(2); });
  ASSERT_TRUE(f.wait_for(1, 1000ms)) << "the earlier timer waited for the later one";
  EXPECT_EQ(f.order(), std::vector<int>{2});
  late->cancel();
  EXPECT_EQ(heap().size(), 0u);
}

TEST_F(TimerHeapTest, ACancelledTimerNeverFiresAndReleasesWhatItHeld) {
  firings f;
  auto held = std::make_shared<int>(7);
  std::weak_ptr<int> watch = held;
  const auto t0 = steady::now();
  auto cancelled = heap().start(t0 + 30ms, [&f, held] { f.add(1); });
  auto kept = heap().start(t0 + 60ms, [&f] { f.add(2); });
  held.reset();
  cancelled->cancel();
  cancelled->cancel();  // idempotent
  EXPECT_TRUE(watch.expired());
  ASSERT_TRUE(f.wait_for(1));
  EXPECT_EQ(f.order(), std::vector<int>{2});
  kept->cancel();  // after it fired: no effect
  EXPECT_EQ(f.order(), std::vector<int>{2});
}

// A timer given a target runs on the target's io thread, not on the heap's.
TEST_F(TimerHeapTest, ATargetedTimerRunsOnItsTargetsThread) {
  io_runtime other;
  const auto target = static_cast<asio::io_context*>(other.native())->get_executor();
  std::promise<bool> on_target;
  auto t = heap().start(
      steady::now() + 10ms,
      [&on_target, target] { on_target.set_value(target.running_in_this_thread()); }, target);
  auto result = on_target.get_future();
  ASSERT_EQ(result.wait_for(2s), std::future_status::ready);
  EXPECT_TRUE(result.get());
}

// The scheduler's pump asks whether a timer is due between its turns of jobs, so that a due
// timer's wake (a deadline's socket close) is not held behind a long backlog of them.
TEST_F(TimerHeapTest, ATimerIsDueFromItsTimeUntilItFires) {
  firings f;
  const auto when = steady::now() + 20ms;
  auto t = heap().start(when, [&f] { f.add(1); });
  EXPECT_FALSE(heap().due(steady::now()));
  // The io thread is kept busy past the timer's time, as by a long run of jobs: the wake waits in
  // its queue, and meanwhile the timer reads as due.
  std::promise<bool> due_while_busy;
  asio::post(ctx(), [this, when, &due_while_busy] {
    while (steady::now() <= when) std::this_thread::yield();
    due_while_busy.set_value(io_.timers_due());
  });
  auto busy = due_while_busy.get_future();
  ASSERT_EQ(busy.wait_for(2s), std::future_status::ready);
  EXPECT_TRUE(busy.get());
  ASSERT_TRUE(f.wait_for(1));
  std::promise<bool> due_after;
  asio::post(ctx(), [this, &due_after] { due_after.set_value(io_.timers_due()); });
  auto after = due_after.get_future();
  ASSERT_EQ(after.wait_for(2s), std::future_status::ready);
  EXPECT_FALSE(after.get());
  EXPECT_EQ(heap().size(), 0u);
}

// Armed and cancelled from several threads at once, as request actors do: nothing fires that
// was cancelled, everything that was not fires once, and the heap ends empty.
TEST_F(TimerHeapTest, ConcurrentArmingAndCancellingLeavesNothingBehind) {
  std::atomic<int> fired_cancelled{0};
  std::atomic<int> fired_kept{0};
  constexpr int threads = 4;
  constexpr int per_thread = 5000;
  std::vector<std::thread> workers;
  for (int w = 0; w < threads; ++w) {
    workers.emplace_back([&, w] {
      std::vector<std::shared_ptr<timer>> mine;
      for (int i = 0; i < per_thread; ++i) {
        const bool keep = i % 100 == 0;
        const auto when = steady::now() + std::chrono::milliseconds(keep ? 5 : 200 + (i + w) % 50);
        mine.push_back(heap().start(when, [&, keep] { ++(keep ? fired_kept : fired_cancelled); }));
        if (!keep) mine.back()->cancel();
      }
    });
  }
  for (auto& t : workers) t.join();
  // Every timer armed above is due within 250 ms of its arming; the heap fires in time order, so
  // once a timer due after all of them has fired, so has everything that was going to.
  std::promise<void> after_all;
  auto sentinel = heap().start(steady::now() + 260ms, [&after_all] { after_all.set_value(); });
  ASSERT_EQ(after_all.get_future().wait_for(2s), std::future_status::ready);
  EXPECT_EQ(fired_kept.load(), threads * per_thread / 100);
  EXPECT_EQ(fired_cancelled.load(), 0);
  EXPECT_EQ(heap().size(), 0u);
}

}  // namespace
}  // namespace tether::net
