// The running gateway as an operator sees it in ps, top and ss.
#include <gtest/gtest.h>

#include <sched.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "tests/integration/harness.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

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

TEST(ProcessTest, TheStartLineNamesTheConfigFileTheThreadsAndTheUpstreams) {
  mock_server mock;
  gateway_process gw{gateway_config(mock, "", model_entry("m", "mock"))};
  auto line = gw.process().wait_for_line(std::regex("listening on"), std::chrono::seconds(5));
  ASSERT_TRUE(line);
  EXPECT_NE(line->line.find("config " + gw.config_path()), std::string::npos) << line->line;
  EXPECT_TRUE(std::regex_search(line->line, std::regex(R"([1-9]\d* io thread\(s\))")))
      << line->line;
  EXPECT_NE(line->line.find("upstreams mock"), std::string::npos) << line->line;
}

std::string environ_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The two process-wide settings are the config's ([server] sched_batch, malloc_tcache_count),
// and the start line says what the process runs with.
// server.threads: that many io threads, named so in top and ps, each serving requests.
TEST(ProcessTest, ThreadsStartsThatManyIoThreadsAndEachServes) {
  mock_server mock;
  gateway_process gw{gateway_config(mock, "", model_entry("m", "mock"), "", "threads = 3\n")};
  auto line = gw.process().wait_for_line(std::regex("listening on"), std::chrono::seconds(5));
  ASSERT_TRUE(line);
  EXPECT_NE(line->line.find(" 3 io thread(s)"), std::string::npos) << line->line;
  const auto tasks = "/proc/" + std::to_string(gw.process().pid()) + "/task";
  const auto io_threads = [&tasks] {
    int n = 0;
    for (const auto& task : std::filesystem::directory_iterator(tasks)) {
      std::ifstream in(task.path() / "comm");
      std::string name;
      std::getline(in, name);
      if (name == "tether.io") ++n;
    }
    return n;
  };
  // Each thread names itself as it starts, which may be just after the start line on a busy
  // machine: no event to await from outside, so /proc is read until the bound.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (io_threads() < 3 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(io_threads(), 3);
  // Each request on a connection of its own: the connections take turns between the threads.
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(request("POST", gw.port(), "/v1/chat/completions", chat_body("m")).status, 200)
        << "request " << i;
  }
}

TEST(ProcessTest, TheProcessWideSettingsAreTheConfigsAndTheStartLineSaysSo) {
  mock_server mock;
  {
    gateway_process gw{gateway_config(mock, "", model_entry("m", "mock"))};
    auto line = gw.process().wait_for_line(std::regex("listening on"), std::chrono::seconds(5));
    ASSERT_TRUE(line);
    EXPECT_NE(line->line.find("scheduling as started (sched_batch off), "
                              "GLIBC_TUNABLES glibc.malloc.tcache_count=64"),
              std::string::npos)
        << line->line;
    EXPECT_EQ(sched_getscheduler(gw.process().pid()), SCHED_OTHER);
    EXPECT_NE(environ_of(gw.process().pid()).find("GLIBC_TUNABLES=glibc.malloc.tcache_count=64"),
              std::string::npos);
  }
  gateway_process gw{gateway_config(mock, "", model_entry("m", "mock"), "",
                                    "sched_batch = true\nmalloc_tcache_count = 0")};
  auto line = gw.process().wait_for_line(std::regex("listening on"), std::chrono::seconds(5));
  ASSERT_TRUE(line);
  EXPECT_NE(line->line.find("SCHED_BATCH, glibc malloc defaults"), std::string::npos) << line->line;
  EXPECT_EQ(sched_getscheduler(gw.process().pid()), SCHED_BATCH);
  EXPECT_EQ(environ_of(gw.process().pid()).find("GLIBC_TUNABLES"), std::string::npos);
  EXPECT_EQ(comm_of(gw.process().pid()), "tether");
}

TEST(ProcessTest, CheckPrintsEachPublicModelsRouteAsComments) {
  temp_dir dir;
  auto path =
      dir.write_file("routes.toml",
                     "[[upstreams]]\nname = \"a\"\nbase_url = \"http://127.0.0.1:9\"\n"
                     "[[upstreams]]\nname = \"b\"\nbase_url = \"http://127.0.0.1:10\"\n"
                     "[[models]]\nname = \"big\"\nupstream = \"a\"\nupstream_model = \"big-a\"\n"
                     "fallbacks = [\"small\"]\n"
                     "[[models]]\nname = \"big\"\nupstream = \"b\"\nupstream_model = \"big-b\"\n"
                     "fallbacks = [\"small\"]\n"
                     "[[models]]\nname = \"small\"\nupstream = \"b\"\n");
  child_process p{TETHER_BINARY, {"check", "--config", path.string()}};
  ASSERT_EQ(p.wait_exit(std::chrono::seconds(10)), std::optional<int>(0)) << p.output();
  const auto out = p.output();
  EXPECT_NE(out.find("# route big: deployments a (big-a), b (big-b); surfaces chat, completions, "
                     "embeddings, responses; tries big -> small\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("# route small: deployments b (small);"), std::string::npos) << out;
  // The printed config, routes included, is a config that loads the same.
  auto again = dir.write_file("again.toml", out);
  child_process q{TETHER_BINARY, {"check", "--config", again.string()}};
  ASSERT_EQ(q.wait_exit(std::chrono::seconds(10)), std::optional<int>(0)) << q.output();
  // The same, but for the file named in the first line.
  const auto body = [](const std::string& text) { return text.substr(text.find('\n')); };
  EXPECT_EQ(body(q.output()), body(out));
}

}  // namespace
}  // namespace tether::test
