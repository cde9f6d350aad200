// The kernel's receive timestamp over a real loopback TCP connection, and the clock conversion
// that turns it into the request's steady-clock arrival.
#include "net/receive_stamp.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "tests/support/receive_stamp_probe.hpp"

namespace tether::net {
namespace {

using namespace std::chrono_literals;
using wall = std::chrono::system_clock;
using steady = std::chrono::steady_clock;

using test::loopback_pair;

TEST(ReceiveStampTest, BytesThatWaitedInTheSocketCarryTheMomentTheyArrived) {
  loopback_pair pair;
  ASSERT_TRUE(pair.ok);
  ASSERT_TRUE(enable_receive_stamps(pair.server));
  // While this socket is open the kernel keeps stamping; it may need a moment to start.
  ASSERT_TRUE(test::await_receive_stamps(std::chrono::milliseconds(2000)));
  const auto before_send = wall::now();
  ASSERT_EQ(::send(pair.client, "GET", 3, 0), 3);
  ASSERT_TRUE(pair.readable(2000ms));
  // The bytes sit unread, as they do behind a busy io thread; the wait is the thing measured.
  std::this_thread::sleep_for(40ms);
  char buf[16];
  const auto read = read_stamped(pair.server, buf, sizeof buf);
  const auto read_at = wall::now();
  ASSERT_EQ(read.n, 3);
  ASSERT_TRUE(read.stamp.has_value());
  EXPECT_GE(*read.stamp, before_send - 1ms);  // the clocks' granularity, nothing more
  EXPECT_LE(*read.stamp, read_at - 35ms);     // when it arrived, not when it was read
}

TEST(ReceiveStampTest, NothingToReadIsEagainAndTheEndOfStreamIsZero) {
  loopback_pair pair;
  ASSERT_TRUE(pair.ok);
  enable_receive_stamps(pair.server);
  char buf[16];
  auto read = read_stamped(pair.server, buf, sizeof buf);
  EXPECT_EQ(read.n, -1);
  EXPECT_TRUE(read.err == EAGAIN || read.err == EWOULDBLOCK) << read.err;
  ::shutdown(pair.client, SHUT_WR);
  ASSERT_TRUE(pair.readable(2000ms));
  read = read_stamped(pair.server, buf, sizeof buf);
  EXPECT_EQ(read.n, 0);
}

TEST(ReceiveStampTest, WithoutStampsEnabledTheReadStillWorks) {
  loopback_pair pair;
  ASSERT_TRUE(pair.ok);
  ASSERT_EQ(::send(pair.client, "abc", 3, 0), 3);
  ASSERT_TRUE(pair.readable(2000ms));
  char buf[16];
  const auto read = read_stamped(pair.server, buf, sizeof buf);
  EXPECT_EQ(read.n, 3);
  EXPECT_FALSE(read.stamp.has_value());
}

TEST(ReceiveStampTest, StampsAreConvertedToTheSteadyClockAndDistrustedWhenImplausible) {
  const auto steady_now = steady::time_point{} + 1h;
  const auto wall_now = wall::time_point{} + 24h * 365 * 50;
  EXPECT_EQ(steady_from_stamp(wall_now - 7ms, steady_now, wall_now), steady_now - 7ms);
  // The wall clock stepped back after the stamp: it is not later than now.
  EXPECT_EQ(steady_from_stamp(wall_now + 3ms, steady_now, wall_now), steady_now);
  // Older than max_age: a clock step forward, not a request that waited that long.
  EXPECT_EQ(steady_from_stamp(wall_now - 11s, steady_now, wall_now), steady_now);
  EXPECT_EQ(steady_from_stamp(wall_now - 11s, steady_now, wall_now, 20s), steady_now - 11s);
}

}  // namespace
}  // namespace tether::net
