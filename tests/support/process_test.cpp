// The test children: what they inherit from the test process.
#include "tests/support/process.hpp"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace tether::test {
namespace {

TEST(ChildProcessTest, AChildKeepsNoneOfTheTestsDescriptorsOpen) {
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);  // not close-on-exec, as Asio's
  child_process child("sleep", {"30"});
  ::close(pair[0]);
  // Had the child inherited pair[0], the other end would see no end until the child exits.
  pollfd p{pair[1], POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 2000), 1) << "the child holds the test's socket open";
  char byte = 0;
  EXPECT_EQ(::read(pair[1], &byte, 1), 0);
  ::close(pair[1]);
}

}  // namespace
}  // namespace tether::test
