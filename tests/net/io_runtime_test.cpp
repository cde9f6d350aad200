// io_runtime in lent mode: a thread of the caller's runs the context, and join() returns only
// once that thread has left the handler it was in.
#include "net/io_runtime.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace tether::net {
namespace {

using namespace std::chrono_literals;

struct blocking_handler {
  std::promise<void> entered;
  std::promise<void> release;
  std::atomic<bool> done{false};
};

TEST(IoRuntimeTest, JoinWaitsForTheLentThreadToLeaveItsHandler) {
  io_runtime io{io_runtime::lent_thread};
  std::thread lent{[&io] { io.run_here(); }};
  blocking_handler h;
  io.post(
      [](void* arg) {
        auto* self = static_cast<blocking_handler*>(arg);
        self->entered.set_value();
        self->release.get_future().wait();
        self->done = true;
      },
      &h);
  ASSERT_EQ(h.entered.get_future().wait_for(5s), std::future_status::ready);
  auto joined = std::async(std::launch::async, [&] {
    io.join();
    return h.done.load();
  });
  // join() is held by the handler: it cannot have returned while the handler waits.
  EXPECT_EQ(joined.wait_for(50ms), std::future_status::timeout);
  h.release.set_value();
  ASSERT_EQ(joined.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(joined.get());  // the handler had finished when join() returned
  lent.join();
}

TEST(IoRuntimeTest, RunHereReturnsAtOnceOnceStopped) {
  io_runtime io{io_runtime::lent_thread};
  io.join();
  auto ran = std::async(std::launch::async, [&io] { io.run_here(); });
  EXPECT_EQ(ran.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(io.stopped());
}

TEST(IoRuntimeTest, HandlersPostedFromAnotherThreadRunOnTheLentThread) {
  io_runtime io{io_runtime::lent_thread};
  std::promise<std::thread::id> lent_id;
  std::thread lent{[&] {
    lent_id.set_value(std::this_thread::get_id());
    io.run_here();
  }};
  const auto expected = lent_id.get_future().get();
  struct probe {
    std::promise<std::thread::id> ran_on;
  } p;
  io.post([](void* arg) { static_cast<probe*>(arg)->ran_on.set_value(std::this_thread::get_id()); },
          &p);
  auto ran = p.ran_on.get_future();
  ASSERT_EQ(ran.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(ran.get(), expected);
  io.join();
  lent.join();
}

}  // namespace
}  // namespace tether::net
