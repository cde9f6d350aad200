// The running gateway as an operator sees it in ps, top and ss.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

std::string comm_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

TEST(ProcessTest, TheGatewayIsNamedTetherAfterItsStartUpRestart) {
  mock_server mock;
  gateway_process gw{gateway_config(mock, "", model_entry("m", "mock"))};
  // It has restarted itself (the allocator tunable) by the time it listens.
  ASSERT_EQ(request("GET", gw.port(), "/healthz").status, 200);
  EXPECT_EQ(comm_of(gw.process().pid()), "tether");
}

}  // namespace
}  // namespace tether::test
