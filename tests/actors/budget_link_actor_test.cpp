// A member's link to the budget host, in a real actor system with CAF's middleman: the host is a
// budget actor published on a port of 127.0.0.1, as `[cluster] budget_listen` publishes it.
#include "actors/budget_link_actor.hpp"

#include <gtest/gtest.h>
#include <caf/io/all.hpp>

#include <optional>
#include <string>
#include <thread>

#include "actors/budget_actor.hpp"
#include "actors/messages.hpp"
#include "actors/policy/routing/upstream_health.hpp"
#include "tests/actors/manual_timers.hpp"

namespace tether {
namespace {

using namespace std::chrono_literals;

class BudgetLinkActorTest : public ::testing::Test {
 protected:
  BudgetLinkActorTest()
      : host_stats_({"u0"}), member_stats_({"u0"}), system_(cfg_.load<caf::io::middleman>()) {
    budget_limits l;
    l.global = 4;
    l.per_upstream = {4};
    l.tokens_per_upstream = {1000};
    host_ = system_.spawn(budget_actor, l, &host_stats_, nullptr);
    auto port = system_.middleman().publish(host_, 0, "127.0.0.1", true);
    EXPECT_TRUE(port) << system_.render(port.error());
    port_ = port ? *port : 0;
    own_budget_ = system_.spawn(budget_actor, l, &member_stats_, nullptr);
  }

  // Each actor is seen gone before the system goes. Killed without waiting, the system's end now
  // and then waited forever for a detached thread of the middleman's whose actor was never
  // released (the link was still being torn down with its proxy of the host).
  ~BudgetLinkActorTest() override {
    caf::scoped_actor self{system_};
    for (const auto* a : {&link_, &own_budget_, &host_}) {
      if (!*a) continue;
      self->send_exit(*a, caf::exit_reason::kill);
      self->wait_for(*a);
    }
  }

  void spawn_link() {
    link_ = system_.spawn(budget_link_actor, own_budget_, std::string{"127.0.0.1"}, port_, 0ms,
                          &member_stats_, &timers_);
  }

  // True once the member reports itself joined, within `wait`.
  bool await_joined(std::chrono::milliseconds wait = 5s) {
    const auto until = std::chrono::steady_clock::now() + wait;
    while (std::chrono::steady_clock::now() < until) {
      if (member_stats_.render().find("tether_cluster_connected 1\n") != std::string::npos)
        return true;
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }

  // The first health news `who` hears within `wait`, as "upstream reason".
  static std::optional<std::string> news(caf::scoped_actor& who,
                                         std::chrono::milliseconds wait = 2s) {
    std::optional<std::string> out;
    who->receive([&](health_news_atom, const std::string& upstream, std::int32_t reason,
                     std::int64_t) { out = upstream + " " + std::to_string(reason); },
                 caf::after(wait) >> [] {});
    return out;
  }

  metrics host_stats_;
  metrics member_stats_;
  manual_timers timers_;  // the link's reconnect backoff: never due here
  caf::actor_system_config cfg_;
  caf::actor_system system_;
  caf::actor host_;
  caf::actor own_budget_;
  caf::actor link_;
  std::uint16_t port_ = 0;
};

// The link joins while the node starts, before the node's health actor subscribes: an ejection
// the host told it of at the join still reaches that late subscriber.
TEST_F(BudgetLinkActorTest, NewsHeardBeforeTheHealthActorSubscribesReachesIt) {
  const auto reason = static_cast<std::int32_t>(ejection_reason::failures);
  {
    caf::scoped_actor other_member{system_};
    other_member->send(host_, health_report_atom::value, std::string{"u0"}, reason,
                       std::int64_t{60000});
  }
  spawn_link();
  ASSERT_TRUE(await_joined());
  // A round trip through the host, via the link (a rate is the host's to count while joined):
  // its answer comes after the news the host sent the link at the join, so the news is in the
  // link's mailbox before the subscription below.
  caf::scoped_actor health{system_};
  health->request(link_, 2s, rate_atom::value, std::int64_t{-1}, std::uint64_t{0})
      .receive(
          [](bool, bool, std::int64_t, std::int64_t, std::string&) {},
          [](caf::error& e) { ADD_FAILURE() << "no answer through the link: " << to_string(e); });
  health->send(link_, health_subscribe_atom::value);
  EXPECT_EQ(news(health), "u0 " + std::to_string(reason));
}

// News the host sends after the subscription is passed on as it comes, and only once.
TEST_F(BudgetLinkActorTest, NewsAfterTheSubscriptionIsPassedOnOnce) {
  spawn_link();
  ASSERT_TRUE(await_joined());
  caf::scoped_actor health{system_};
  health->send(link_, health_subscribe_atom::value);
  const auto reason = static_cast<std::int32_t>(ejection_reason::failures);
  {
    caf::scoped_actor other_member{system_};
    other_member->send(host_, health_report_atom::value, std::string{"u0"}, reason,
                       std::int64_t{60000});
  }
  EXPECT_EQ(news(health), "u0 " + std::to_string(reason));
  EXPECT_EQ(news(health, 200ms), std::nullopt);
}

// Through the middleman, the host's refusal of a claim over the whole token cap reaches the
// member's connection actor as that, not as a full queue, as on a standalone node: the request
// goes on to a fallback whichever node it came to.
TEST_F(BudgetLinkActorTest, ARefusalForATokenCapTooSmallKeepsItsKindAcrossTheCluster) {
  spawn_link();
  ASSERT_TRUE(await_joined());
  caf::scoped_actor connection{system_};
  auto ask = [&](std::uint64_t tokens) {
    std::optional<std::pair<slot_refusal, std::string>> answer;
    connection->send(link_, acquire_atom::value, std::uint64_t{0}, std::int64_t{-1},
                     std::int64_t{0}, tokens);
    connection->receive(
        [&](grant_atom, std::int32_t refusal, const std::string& reason) {
          answer.emplace(static_cast<slot_refusal>(refusal), reason);
        },
        caf::after(std::chrono::seconds(5)) >> [] {});
    return answer;
  };
  auto heavy = ask(1500);
  ASSERT_TRUE(heavy.has_value());
  EXPECT_EQ(heavy->first, slot_refusal::too_heavy);
  EXPECT_NE(heavy->second.find("max_tokens_in_flight (1000)"), std::string::npos);
  auto fits = ask(1000);
  ASSERT_TRUE(fits.has_value());
  EXPECT_EQ(fits->first, slot_refusal::none);
}

}  // namespace
}  // namespace tether
