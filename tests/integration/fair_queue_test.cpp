// The fair admission queue (contract: "Token-aware admission, per-key limits, fair queueing"):
// requests waiting for a slot are admitted round-robin across keys in proportion to each key's
// weight, and within a key by X-Priority (capped at the key's max_priority), then by arrival.
// Each test fills the queue behind one request holding the only slot, lets that request go, and
// reads the order in which the upstream saw the waiters.
#include <gtest/gtest.h>

#include <future>
#include <map>

#include "tests/integration/harness.hpp"
#include "tests/support/leaving_client.hpp"
#include "tests/support/taken_port.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

struct team {
  std::string name;
  std::string token;
  std::string settings;  // more lines of its [[keys]] entry
};

std::string one_slot_gateway(const mock_server& mock, const std::vector<team>& teams,
                             const std::string& cluster = "") {
  std::string keys;
  for (const auto& t : teams) {
    keys += "[[keys]]\nname = \"" + t.name + "\"\nsha256 = \"" + sha256_hex(t.token) +
            "\"\nmodels = [\"*\"]\n" + t.settings + "\n";
  }
  return gateway_config(mock, "max_retries = 0",
                        model_entry("hold", "mock-hang") + model_entry("slow", "mock-delay-10"),
                        "[budget]\nmax_in_flight = 1\nqueue_max = 200\n\n" + keys +
                            (cluster.empty() ? "" : "[cluster]\n" + cluster + "\n"));
}

header_map as(const team& t, const std::string& id, const std::string& priority = "") {
  header_map h{{"authorization", "Bearer " + t.token}, {"x-request-id", id}};
  if (!priority.empty()) h.emplace_back("x-priority", priority);
  return h;
}

// A request that holds the gateway's only slot until the test lets it go.
class slot_holder {
 public:
  slot_holder(gateway_process& gw, mock_server& mock, const team& t)
      : client_(gw.port(), "/v1/chat/completions", chat_body("hold"), as(t, "holder")) {
    mock.wait_for_stats([](const auto& s) { return s.at("active").as_int64() == 1; });
  }
  void let_go() { client_.leave(); }

 private:
  leaving_client client_;
};

class queued_calls {
 public:
  explicit queued_calls(gateway_process& gw) : gw_(&gw) {}

  // Sends one request and returns once it waits in the queue (the queue's depth is `depth`).
  void send(const team& t, const std::string& id, std::size_t depth,
            const std::string& priority = "") {
    send_to(*gw_, t, id, depth, priority);
  }
  // The same through another node of a cluster (its depth counts its own waiters).
  void send_to(gateway_process& node, const team& t, const std::string& id, std::size_t depth,
               const std::string& priority = "") {
    const auto port = node.port();
    calls_.push_back(std::async(std::launch::async, [port, t, id, priority] {
      return request("POST", port, "/v1/chat/completions", chat_body("slow"), as(t, id, priority));
    }));
    ASSERT_TRUE(await_metric(port, "tether_queue_depth", static_cast<double>(depth)))
        << id << " did not queue";
  }
  void expect_all_ok() {
    for (auto& c : calls_) EXPECT_EQ(c.get().status, 200);
  }

 private:
  gateway_process* gw_;
  std::vector<std::future<http_response>> calls_;
};

// The x-request-ids of the requests the upstream saw, in the order it saw them, without the
// slot holder's.
std::vector<std::string> admitted_order(mock_server& mock, std::size_t expected) {
  auto stats = mock.wait_for_stats([&](const auto& s) {
    return s.at("requests").as_int64() > static_cast<std::int64_t>(expected);
  });
  std::vector<std::string> ids;
  for (const auto& e : mock_log(stats)) {
    auto id = str(e.at("headers").at("x-request-id"));
    if (id != "holder") ids.push_back(id);
  }
  return ids;
}

std::vector<std::size_t> places_of(const std::vector<std::string>& order, char prefix) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (order[i][0] == prefix) out.push_back(i);
  }
  return out;
}

const team team_a{"a", "tok-team-a-0123456789", ""};
const team team_b{"b", "tok-team-b-0123456789", ""};

TEST(FairQueueTest, AKeyThatQueuedThirtyDoesNotMakeAnotherKeysThreeWaitBehindThem) {
  mock_server mock;
  gateway_process gw{one_slot_gateway(mock, {team_a, team_b})};
  slot_holder holder(gw, mock, team_a);
  queued_calls calls(gw);
  for (int i = 0; i < 30; ++i) calls.send(team_a, "a" + std::to_string(i), i + 1);
  for (int i = 0; i < 3; ++i) calls.send(team_b, "b" + std::to_string(i), 31 + i);
  holder.let_go();
  calls.expect_all_ok();
  const auto order = admitted_order(mock, 33);
  ASSERT_EQ(order.size(), 33u);
  // Turn about from the moment both wait: b's three go within the first six, not after a's
  // thirty as they would by arrival.
  EXPECT_EQ(places_of(order, 'b'), (std::vector<std::size_t>{1, 3, 5}));
  // Within a key, arrival order holds.
  std::vector<std::string> a_order;
  for (const auto& id : order) {
    if (id[0] == 'a') a_order.push_back(id);
  }
  for (std::size_t i = 0; i < a_order.size(); ++i) EXPECT_EQ(a_order[i], "a" + std::to_string(i));
}

TEST(FairQueueTest, KeysWeightedThreeToOneAreAdmittedThreeToOneUnderSaturation) {
  mock_server mock;
  const team heavy{"heavy", "tok-heavy-0123456789", "weight = 3"};
  const team light{"light", "tok-light-0123456789", "weight = 1"};
  gateway_process gw{one_slot_gateway(mock, {heavy, light})};
  slot_holder holder(gw, mock, heavy);
  queued_calls calls(gw);
  for (int i = 0; i < 24; ++i) {
    calls.send(heavy, "h" + std::to_string(i), 2 * i + 1);
    calls.send(light, "l" + std::to_string(i), 2 * i + 2);
  }
  holder.let_go();
  calls.expect_all_ok();
  const auto order = admitted_order(mock, 48);
  ASSERT_EQ(order.size(), 48u);
  // While both keys wait (the first 32 admissions), three of heavy's for each of light's.
  const std::vector<std::string> both_waiting(order.begin(), order.begin() + 32);
  EXPECT_EQ(places_of(both_waiting, 'h').size(), 24u);
  EXPECT_EQ(places_of(both_waiting, 'l').size(), 8u);
  for (std::size_t i = 0; i + 4 <= both_waiting.size(); i += 4) {
    const std::vector<std::string> run(both_waiting.begin() + i, both_waiting.begin() + i + 4);
    EXPECT_EQ(places_of(run, 'h').size(), 3u) << "admissions " << i << " to " << i + 3;
  }
}

TEST(FairQueueTest, XPriorityHighJumpsItsOwnKeysQueueOnlyAndOnlyAsHighAsTheKeyMayGo) {
  mock_server mock;
  const team boss{"a", "tok-team-a-0123456789", "max_priority = \"high\""};
  gateway_process gw{one_slot_gateway(mock, {boss, team_b})};
  slot_holder holder(gw, mock, boss);
  queued_calls calls(gw);
  for (int i = 0; i < 4; ++i) calls.send(boss, "a" + std::to_string(i), i + 1);
  for (int i = 0; i < 4; ++i) calls.send(team_b, "b" + std::to_string(i), 5 + i);
  calls.send(boss, "a-high", 9, "high");
  // b may ask for high but its key's highest is normal: it waits as normal, behind b0..b3.
  calls.send(team_b, "b-high", 10, "HIGH");
  holder.let_go();
  calls.expect_all_ok();
  const auto order = admitted_order(mock, 10);
  const std::vector<std::string> expected{"a-high", "b0", "a0", "b1", "a1",
                                          "b2",     "a2", "b3", "a3", "b-high"};
  EXPECT_EQ(order, expected);
}

TEST(FairQueueTest, AnXPriorityThatNamesNoClassIs400WithoutAnAttempt) {
  mock_server mock;
  gateway_process gw{one_slot_gateway(mock, {team_a})};
  auto r = request("POST", gw.port(), "/v1/chat/completions", chat_body("slow"),
                   as(team_a, "bad", "urgent"));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(str(r.json().at("error").at("code")), "bad_request");
  EXPECT_NE(str(r.json().at("error").at("message")).find("X-Priority"), std::string::npos);
  EXPECT_EQ(mock.stats().at("requests").as_int64(), 0);
  EXPECT_EQ(request("POST", gw.port(), "/v1/chat/completions", chat_body("slow"),
                    as(team_a, "fine", "low"))
                .status,
            200);
}

// In a cluster the budget host's queue is the one that decides, and it is fair across the keys of
// every node's requests: a member's leases wait in the lane of their key.
TEST(FairQueueTest, TheBudgetHostsQueueIsFairAcrossTheKeysOfEveryNode) {
  mock_server mock;
  const auto budget_port = std::to_string(free_port());
  gateway_process host{one_slot_gateway(mock, {team_a, team_b},
                                        "budget_listen = \"127.0.0.1:" + budget_port + "\"")};
  gateway_process member{
      one_slot_gateway(mock, {team_a, team_b}, "budget_host = \"127.0.0.1:" + budget_port + "\"")};
  ASSERT_TRUE(await_metric(member.port(), "tether_cluster_connected", 1, 5s));
  slot_holder holder(host, mock, team_a);
  queued_calls calls(host);
  for (int i = 0; i < 10; ++i) calls.send_to(member, team_a, "a" + std::to_string(i), i + 1);
  for (int i = 0; i < 3; ++i) calls.send(team_b, "b" + std::to_string(i), i + 1);
  holder.let_go();
  calls.expect_all_ok();
  const auto order = admitted_order(mock, 13);
  ASSERT_EQ(order.size(), 13u);
  const auto b_places = places_of(order, 'b');
  ASSERT_EQ(b_places.size(), 3u);
  // By arrival the host's three would come after the member's ten.
  EXPECT_LT(b_places.back(), 7u) << "b's were admitted at " << b_places[0] << ", " << b_places[1]
                                 << ", " << b_places[2];
  EXPECT_EQ(mock.stats().at("max_active").as_int64(), 1);
}

}  // namespace
}  // namespace tether::test
