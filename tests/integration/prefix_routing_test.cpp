// routing = "prefix" (contract, "Routing"): a conversation's turns go to one deployment, the
// key's home, unless its live work is past the load bound (a spill, counted in
// tether_route_decisions_total); a reload that removes a deployment moves only the
// conversations it was home to. Three deployments of one model, each on its own tether-mock, so
// that the mocks' own logs say where each turn went.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t conversations = 1000;
constexpr std::size_t turns = 3;
constexpr std::size_t clients = 8;  // at once: load enough that some keys spill

// `load_factor`: prefix_load_factor; "" leaves the default.
std::string config_for(const std::vector<std::pair<std::string, const mock_server*>>& deployments,
                       const std::string& load_factor = "") {
  std::string out = "[server]\nlisten = \"127.0.0.1:0\"\n\n[request]\n\n";
  for (const auto& [name, mock] : deployments) {
    out += "[[upstreams]]\nname = \"" + name + "\"\nbase_url = \"" + mock->url() +
           "\"\nmax_in_flight = 64\n\n";
  }
  for (const auto& [name, mock] : deployments) {
    out += "[[models]]\nname = \"agent\"\nupstream = \"" + name +
           "\"\nupstream_model = \"mock\"\nrouting = \"prefix\"\n" +
           (load_factor.empty() ? "" : "prefix_load_factor = " + load_factor + "\n") + "\n";
  }
  return out + "[telemetry]\nlog_format = \"json\"\n";
}

// Conversation c's request at turn t: its own system prompt, longer than prefix_bytes (the
// default, 2048), then the turns so far, each a user message and the answer to it.
std::string turn_body(std::size_t c, std::size_t t) {
  std::string system = "You are agent " + std::to_string(c) + ". ";
  while (system.size() < 2100) system += "Follow the house rules. ";
  std::string body =
      R"({"model":"agent","messages":[{"role":"system","content":")" + system + "\"}";
  for (std::size_t i = 0; i <= t; ++i) {
    body += R"(,{"role":"user","content":"question )" + std::to_string(i) + "\"}";
    if (i < t) body += R"(,{"role":"assistant","content":"answer )" + std::to_string(i) + "\"}";
  }
  return body + "]}";
}

std::string id_of(std::size_t c, std::size_t t) {
  return "conv-" + std::to_string(c) + "-" + std::to_string(t);
}

// Every conversation's turns from `first` to `last`, `clients` conversations at a time; true
// when each got a 200.
bool run_turns(std::uint16_t port, std::size_t first, std::size_t last) {
  std::atomic<std::size_t> failed{0};
  std::vector<std::thread> threads;
  for (std::size_t k = 0; k < clients; ++k) {
    threads.emplace_back([&, k] {
      http_connection conn{port, 10s};
      for (std::size_t c = k; c < conversations; c += clients) {
        for (std::size_t t = first; t <= last; ++t) {
          auto r = conn.request("POST", "/v1/chat/completions", turn_body(c, t),
                                {{"x-request-id", id_of(c, t)}}, 10s);
          if (r.status != 200) ++failed;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  return failed == 0;
}

// Which mock (by index) each request id reached.
std::map<std::string, std::size_t> where_each_went(
    const std::vector<std::unique_ptr<mock_server>>& mocks) {
  std::map<std::string, std::size_t> out;
  for (std::size_t m = 0; m < mocks.size(); ++m) {
    for (const auto& e : mock_log(mocks[m]->stats())) {
      const auto* id = e.at("headers").as_object().if_contains("x-request-id");
      if (id) out[std::string(id->as_string())] = m;
    }
  }
  return out;
}

double decisions(std::uint16_t port, const char* kind) {
  return metric(port,
                std::string("tether_route_decisions_total{model=\"agent\",kind=\"") + kind + "\"}");
}

std::vector<std::unique_ptr<mock_server>> three_mocks() {
  std::vector<std::unique_ptr<mock_server>> mocks;
  for (int i = 0; i < 3; ++i) mocks.push_back(std::make_unique<mock_server>());
  return mocks;
}

// With three deployments a factor of 3 can never bind (⌈3 × (L + 1) / 3⌉ = L + 1, more than any
// one deployment's live work): every decision is the key's home, so where each turn goes is
// exact. Then c is removed by a reload: exactly c's conversations move, and none reaches it.
TEST(PrefixRoutingTest, AConversationsTurnsStayOnOneDeploymentAndAReloadMovesOnlyTheRemovedOnes) {
  auto mocks = three_mocks();
  gateway_process gw{
      config_for({{"a", mocks[0].get()}, {"b", mocks[1].get()}, {"c", mocks[2].get()}}, "3")};

  ASSERT_TRUE(run_turns(gw.port(), 0, turns - 1));
  const auto went = where_each_went(mocks);
  ASSERT_EQ(went.size(), conversations * turns);
  std::vector<std::size_t> home(conversations);
  std::array<std::size_t, 3> homes{};
  std::size_t moved_turns = 0;
  for (std::size_t c = 0; c < conversations; ++c) {
    home[c] = went.at(id_of(c, 0));
    ++homes[home[c]];
    for (std::size_t t = 1; t < turns; ++t) moved_turns += went.at(id_of(c, t)) != home[c] ? 1 : 0;
  }
  EXPECT_EQ(moved_turns, 0u);
  EXPECT_EQ(decisions(gw.port(), "prefix_home"), static_cast<double>(conversations * turns));
  EXPECT_EQ(decisions(gw.port(), "prefix_spill"), 0);
  EXPECT_EQ(decisions(gw.port(), "least_work"), 0);
  std::cout << "conversations per deployment: " << homes[0] << "/" << homes[1] << "/" << homes[2]
            << "\n";
  for (auto n : homes) {
    EXPECT_GT(n, conversations / 5) << "a deployment's share of the conversations";
    EXPECT_LT(n, conversations / 2) << "a deployment's share of the conversations";
  }

  auto line = reload(gw, config_for({{"a", mocks[0].get()}, {"b", mocks[1].get()}}, "3"));
  ASSERT_TRUE(line && line->find("config reloaded") != std::string::npos) << line.value_or("none");
  for (auto& m : mocks) m->reset();
  ASSERT_TRUE(run_turns(gw.port(), turns, turns));
  const auto after = where_each_went(mocks);
  ASSERT_EQ(after.size(), conversations);
  std::size_t moved = 0;
  for (std::size_t c = 0; c < conversations; ++c) {
    const auto now = after.at(id_of(c, turns));
    EXPECT_NE(now, 2u) << "conversation " << c << " reached the removed deployment";
    if (home[c] != 2) {
      EXPECT_EQ(now, home[c]) << "conversation " << c << " moved off a deployment that stayed";
    }
    moved += now != home[c] ? 1 : 0;
  }
  std::cout << "after removing c: " << moved << " of " << conversations
            << " conversations moved (c had " << homes[2] << ")\n";
  EXPECT_EQ(moved, homes[2]);
}

// At the default factor (1.25) and eight callers at once, a home past the bound spills: every
// decision is counted, home or spill, and a turn lands away from its conversation's other turns
// only by a spill (its own, or its first turn's).
TEST(PrefixRoutingTest, SpillsUnderLoadAreCountedAndMoveOnlyTheSpilledTurns) {
  auto mocks = three_mocks();
  gateway_process gw{
      config_for({{"a", mocks[0].get()}, {"b", mocks[1].get()}, {"c", mocks[2].get()}})};
  ASSERT_TRUE(run_turns(gw.port(), 0, turns - 1));
  const auto went = where_each_went(mocks);
  ASSERT_EQ(went.size(), conversations * turns);
  std::size_t moved_turns = 0;
  std::size_t split_conversations = 0;
  for (std::size_t c = 0; c < conversations; ++c) {
    std::size_t away = 0;
    for (std::size_t t = 1; t < turns; ++t) away += went.at(id_of(c, t)) != went.at(id_of(c, 0));
    moved_turns += away;
    split_conversations += away > 0 ? 1 : 0;
  }
  const double spills = decisions(gw.port(), "prefix_spill");
  const double at_home = decisions(gw.port(), "prefix_home");
  std::cout << "turns: " << conversations * turns << ", at home " << at_home << ", spilled "
            << spills << "; turns away from their first " << moved_turns << ", conversations split "
            << split_conversations << "\n";
  EXPECT_EQ(at_home + spills, static_cast<double>(conversations * turns));
  EXPECT_EQ(decisions(gw.port(), "least_work"), 0);
  EXPECT_GT(spills, 0);
  // Each split conversation had at least one spilled turn; one spill moves at most its own
  // conversation's other turns away from its first.
  EXPECT_LE(static_cast<double>(split_conversations), spills);
  EXPECT_LE(static_cast<double>(moved_turns), spills * (turns - 1));
}

}  // namespace
}  // namespace tether::test
