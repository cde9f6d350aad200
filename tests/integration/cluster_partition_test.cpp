// A cluster partition (contract, "Configuration", [cluster], and "Token-aware admission"): the
// budget host stays alive and serving, but a member cannot reach it. The path between them is a
// relay the test cuts: both processes run on, their connection stays open and nothing is reset,
// only no byte passes — a partition as a network makes one. (A frozen host, SIGSTOP, would not
// do: it would serve nobody, and could not itself find the member gone.) The member finds the
// silence, counts its key's rpm alone, and when the path heals rejoins and is counted by the
// host again; the host, for its part, gives back the slots the silent member held.
#include <gtest/gtest.h>

#include <cstdio>
#include <future>

#include "tests/integration/harness.hpp"
#include "tests/support/taken_port.hpp"
#include "tests/support/tcp_relay.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

// How long a node takes to give up a link that carries nothing (the contract's 2 s of silence,
// one 500 ms heartbeat's check late at most), plus the way of the news through the actors and
// the scrape on a loaded machine.
constexpr auto found_silent_within = TETHER_SANITIZED ? 4500ms : 3500ms;

const std::string token = "tok-partition-7";

std::string node_config(const mock_server& mock, const std::string& cluster) {
  return gateway_config(mock, "deadline_ms = 20000\nattempt_timeout_ms = 20000\nmax_retries = 0",
                        model_entry("chat", "mock"),
                        "[cluster]\n" + cluster + "\n\n[[keys]]\nname = \"team\"\nsha256 = \"" +
                            sha256_hex(token) + "\"\nmodels = [\"*\"]\nrpm = 5\n");
}

int call(gateway_process& gw, const std::string& id) {
  return request("POST", gw.port(), "/v1/chat/completions", chat_body("chat"),
                 {{"authorization", "Bearer " + token}, {"x-request-id", id}}, 20s)
      .status;
}

TEST(ClusterPartitionTest, ACutOffMemberCountsRpmAloneAndTheHostCountsItAgainOnceItRejoins) {
  mock_server mock;
  const auto budget_port = free_port();
  gateway_process host{
      node_config(mock, "budget_listen = \"127.0.0.1:" + std::to_string(budget_port) + "\"")};
  tcp_relay path{budget_port};
  // A long lease_idle_ms: the member keeps its slot leased until its link ends.
  gateway_process member{node_config(
      mock,
      "budget_host = \"127.0.0.1:" + std::to_string(path.port()) + "\"\nlease_idle_ms = 60000")};
  ASSERT_TRUE(await_metric(member.port(), "tether_cluster_connected", 1, 5s));
  const std::string slots = "tether_cluster_slots_held{upstream=\"mock\"}";

  // Joined: the host counts the member's requests (2 of the key's 5).
  EXPECT_EQ(call(member, "joined-0"), 200);
  EXPECT_EQ(call(member, "joined-1"), 200);
  ASSERT_TRUE(await_metric(host.port(), slots, 1, 5s)) << "the member keeps its slot leased";

  path.cut();
  const auto cut_at = test_clock::now();
  // A request that asks while the member does not yet know: its ask waits on the silent host,
  // then is counted alone once the host is found lost (not admitted uncounted).
  auto in_the_silence = std::async(std::launch::async, [&] { return call(member, "silence"); });
  // Each side finds the other silent: the member counts itself cut off, and the host gives
  // back the member's slot.
  ASSERT_TRUE(await_metric(member.port(), "tether_cluster_connected", 0, found_silent_within))
      << "the member never found the silent host";
  const auto found_after =
      std::chrono::duration_cast<std::chrono::milliseconds>(test_clock::now() - cut_at);
  std::printf("the member found the host silent %lld ms after the cut\n",
              static_cast<long long>(found_after.count()));
  // Not sooner than the silence allows (the last heartbeat may have come up to one interval
  // before the cut): the relay told the member nothing.
  EXPECT_GE(found_after, 1400ms) << "given up before 2 s of silence";
  EXPECT_TRUE(await_metric(host.port(), slots, 0, found_silent_within))
      << "the host kept the silent member's slot";
  EXPECT_TRUE(member.process().wait_for_line(std::regex("lost the shared budget"), 1s));

  // Cut off, the member counts its key's rpm alone, from its own count: the request asked in the
  // silence and four more, then 429.
  EXPECT_EQ(in_the_silence.get(), 200);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(call(member, "alone-" + std::to_string(i)), 200) << i;
  EXPECT_EQ(call(member, "alone-4"), 429);
  // The host, alive, serves on and counts what it sees: the member's two and one of its own.
  EXPECT_EQ(call(host, "host-0"), 200);

  path.heal();
  ASSERT_TRUE(await_metric(member.port(), "tether_cluster_connected", 1, 10s))
      << "the member never rejoined";
  // Rejoined, the member is counted by the host again, which never heard of the five it admitted
  // alone: 3 of 5 used, two more, then 429 on every node.
  EXPECT_EQ(call(member, "rejoined-0"), 200);
  EXPECT_EQ(call(member, "rejoined-1"), 200);
  EXPECT_EQ(call(member, "rejoined-2"), 429);
  EXPECT_EQ(call(host, "host-1"), 429);
  EXPECT_EQ(mock.stats().at("requests").as_int64(), 2 + 5 + 1 + 2);
}

}  // namespace
}  // namespace tether::test
