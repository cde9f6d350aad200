// The budget actor alone, in a real actor system: slots are granted within the caps, queued
// beyond them, and released only by the holder's exit (its down_msg), never by a message.
#include "actors/budget_actor.hpp"
#include "actors/policy/admission/slot_refusal.hpp"

#include <gtest/gtest.h>

#include "actors/messages.hpp"
#include "actors/policy/admission/recall_scope.hpp"

namespace tether {
namespace {

using namespace std::chrono_literals;

class BudgetActorTest : public ::testing::Test {
 protected:
  BudgetActorTest() : stats_({"u0", "u1"}), system_(cfg_) {}

  caf::actor spawn_budget(std::uint32_t global, std::vector<std::uint32_t> per_upstream,
                          std::vector<std::uint32_t> per_key = {}, std::uint32_t queue_max = 16) {
    budget_limits l;
    l.global = global;
    l.per_upstream = std::move(per_upstream);
    l.per_key = std::move(per_key);
    l.queue_max = queue_max;
    return system_.spawn(budget_actor, l, &stats_, nullptr);  // no queue timeout here
  }

  // Asks for a slot as `holder`; the answer is what arrives within `wait` (nullopt: none).
  static std::optional<bool> acquire(caf::scoped_actor& holder, const caf::actor& budget,
                                     std::uint64_t upstream, std::int64_t key = -1,
                                     std::chrono::milliseconds wait = 2s) {
    holder->send(budget, acquire_atom::value, upstream, key, std::int64_t{0}, std::uint64_t{0});
    return await_grant(holder, wait);
  }
  static std::optional<bool> await_grant(caf::scoped_actor& holder,
                                         std::chrono::milliseconds wait = 2s) {
    std::optional<bool> granted;
    holder->receive(
        [&](grant_atom, std::int32_t refusal, const std::string&) {
          granted = refusal == static_cast<std::int32_t>(slot_refusal::none);
        },
        caf::after(wait) >> [] {});
    return granted;
  }

  // What a member's link actor hears from the budget within `wait`, in order: "grant 3",
  // "refused 3", "recall on", "recall off".
  static std::vector<std::string> heard(caf::scoped_actor& link,
                                        std::chrono::milliseconds wait = 150ms) {
    std::vector<std::string> out;
    bool more = true;
    while (more) {
      link->receive(
          [&](lease_grant_atom, std::uint64_t lease, std::int32_t refusal, const std::string&) {
            const bool ok = refusal == static_cast<std::int32_t>(slot_refusal::none);
            out.push_back((ok ? "grant " : "refused ") + std::to_string(lease));
          },
          [&](recall_atom, bool on, std::int32_t scope, std::int64_t index) {
            std::string s = on ? "recall on" : "recall off";
            if (scope == static_cast<std::int32_t>(recall_scope::upstream))
              s += " upstream " + std::to_string(index);
            if (scope == static_cast<std::int32_t>(recall_scope::key))
              s += " key " + std::to_string(index);
            out.push_back(std::move(s));
          },
          caf::after(wait) >> [&] { more = false; });
    }
    return out;
  }
  static void lease(caf::scoped_actor& link, const caf::actor& budget, std::uint64_t id,
                    std::uint64_t upstream = 0) {
    link->send(budget, lease_atom::value, upstream, std::int64_t{-1}, std::int64_t{0},
               std::uint64_t{0}, id);
  }

  // Declared first so it is destroyed last: the budget actor updates it until the system stops.
  metrics stats_;
  caf::actor_system_config cfg_;
  caf::actor_system system_;
};

TEST_F(BudgetActorTest, SlotsWithinTheUpstreamCapAreGrantedAtOnce) {
  auto budget = spawn_budget(8, {2, 2});
  caf::scoped_actor a{system_}, b{system_};
  EXPECT_EQ(acquire(a, budget, 0), std::optional<bool>(true));
  EXPECT_EQ(acquire(b, budget, 0), std::optional<bool>(true));
  EXPECT_EQ(stats_.upstream_work(0), 2);
  EXPECT_EQ(stats_.upstream_work(1), 0);
}

TEST_F(BudgetActorTest, BeyondTheCapTheRequestWaitsUntilTheHolderExits) {
  auto budget = spawn_budget(8, {1, 1});
  auto a = std::make_unique<caf::scoped_actor>(system_);
  caf::scoped_actor b{system_};
  ASSERT_EQ(acquire(*a, budget, 0), std::optional<bool>(true));
  EXPECT_EQ(acquire(b, budget, 0, -1, 150ms), std::nullopt);  // queued, not refused
  EXPECT_EQ(stats_.queue_depth(), 1);
  // Another upstream is not blocked behind it.
  caf::scoped_actor c{system_};
  EXPECT_EQ(acquire(c, budget, 1), std::optional<bool>(true));
  a.reset();  // the holder exits: only its down_msg frees the slot
  EXPECT_EQ(await_grant(b), std::optional<bool>(true));
  EXPECT_EQ(stats_.upstream_work(0), 1);
  EXPECT_EQ(stats_.queue_depth(), 0);
}

TEST_F(BudgetActorTest, GlobalCapSpansUpstreams) {
  auto budget = spawn_budget(2, {5, 5});
  caf::scoped_actor a{system_}, b{system_}, c{system_};
  EXPECT_EQ(acquire(a, budget, 0), std::optional<bool>(true));
  EXPECT_EQ(acquire(b, budget, 1), std::optional<bool>(true));
  EXPECT_EQ(acquire(c, budget, 1, -1, 150ms), std::nullopt);
}

TEST_F(BudgetActorTest, PerKeyCapIsHonoured) {
  auto budget = spawn_budget(8, {5, 5}, {1, 0});
  caf::scoped_actor a{system_}, b{system_}, c{system_};
  EXPECT_EQ(acquire(a, budget, 0, 0), std::optional<bool>(true));
  EXPECT_EQ(acquire(b, budget, 0, 0, 150ms), std::nullopt);        // key 0 capped at 1
  EXPECT_EQ(acquire(c, budget, 0, 1), std::optional<bool>(true));  // key 1 uncapped
}

TEST_F(BudgetActorTest, FullQueueRefusesAtOnce) {
  auto budget = spawn_budget(1, {1, 1}, {}, 1);
  caf::scoped_actor a{system_}, b{system_}, c{system_};
  EXPECT_EQ(acquire(a, budget, 0), std::optional<bool>(true));
  EXPECT_EQ(acquire(b, budget, 0, -1, 150ms), std::nullopt);
  EXPECT_EQ(acquire(c, budget, 0), std::optional<bool>(false));
}

TEST_F(BudgetActorTest, QueuedWaiterThatExitsLeavesTheQueueAndNeverTakesTheSlot) {
  auto budget = spawn_budget(1, {1, 1});
  auto a = std::make_unique<caf::scoped_actor>(system_);
  auto b = std::make_unique<caf::scoped_actor>(system_);
  caf::scoped_actor c{system_};
  ASSERT_EQ(acquire(*a, budget, 0), std::optional<bool>(true));
  EXPECT_EQ(acquire(*b, budget, 0, -1, 100ms), std::nullopt);
  EXPECT_EQ(acquire(c, budget, 0, -1, 100ms), std::nullopt);
  b.reset();  // waiter gone
  a.reset();  // slot freed: it goes to c, the only waiter left
  EXPECT_EQ(await_grant(c), std::optional<bool>(true));
  caf::scoped_actor probe{system_};
  std::uint64_t held = 99;
  probe->request(budget, 2s, slots_atom::value)
      .receive([&](std::uint64_t n) { held = n; }, [](caf::error&) {});
  EXPECT_EQ(held, 1u);
}

// A cluster member may ask again on behalf of a connection actor that already holds a slot
// (after a budget host outage): the second ask changes nothing; the one exit frees the one slot.
TEST_F(BudgetActorTest, AskingAgainForAHeldSlotCountsItOnce) {
  auto budget = spawn_budget(8, {2, 2});
  auto a = std::make_unique<caf::scoped_actor>(system_);
  ASSERT_EQ(acquire(*a, budget, 0), std::optional<bool>(true));
  EXPECT_EQ(acquire(*a, budget, 0, -1, 100ms), std::nullopt);  // no second answer
  EXPECT_EQ(stats_.upstream_work(0), 1);
  a.reset();
  caf::scoped_actor b{system_}, c{system_};
  EXPECT_EQ(acquire(b, budget, 0), std::optional<bool>(true));
  EXPECT_EQ(acquire(c, budget, 0), std::optional<bool>(true));  // both slots free again
  EXPECT_EQ(stats_.upstream_work(0), 2);
}

using strings = std::vector<std::string>;

// Leased slots count against the cap like any other; the budget host does not count them as its
// own work (the member does), and the link's exit frees every one of them.
TEST_F(BudgetActorTest, LeasesCountAgainstTheCapAndTheLinksExitFreesThemAll) {
  auto budget = spawn_budget(8, {2, 2});
  auto link = std::make_unique<caf::scoped_actor>(system_);
  lease(*link, budget, 1);
  lease(*link, budget, 2);
  // At the upstream's cap: no slot of the link's may sit idle.
  EXPECT_EQ(heard(*link), (strings{"grant 1", "grant 2", "recall on upstream 0"}));
  EXPECT_EQ(stats_.cluster_slots(0), 2);
  EXPECT_EQ(stats_.upstream_work(0), 0);
  caf::scoped_actor c{system_};
  EXPECT_EQ(acquire(c, budget, 0, -1, 100ms), std::nullopt);
  link.reset();  // the member is gone
  EXPECT_EQ(await_grant(c), std::optional<bool>(true));
  EXPECT_EQ(stats_.cluster_slots(0), 1);
  EXPECT_EQ(stats_.upstream_work(0), 1);
}

// A waiter held back by the token cap (no slot cap is reached): the link is recalled for it, and
// the recall is lifted once nobody else waits.
TEST_F(BudgetActorTest, AReturnedLeaseGoesToTheOldestWaiterAndTheRecallIsLifted) {
  budget_limits l;
  l.global = 8;
  l.per_upstream = {8, 8};
  l.tokens_per_upstream = {1000};
  auto budget = system_.spawn(budget_actor, l, &stats_, nullptr);
  caf::scoped_actor link{system_}, b{system_};
  link->send(budget, lease_atom::value, std::uint64_t{0}, std::int64_t{-1}, std::int64_t{0},
             std::uint64_t{600}, std::uint64_t{1});
  EXPECT_EQ(heard(link), (strings{"grant 1"}));
  b->send(budget, acquire_atom::value, std::uint64_t{0}, std::int64_t{-1}, std::int64_t{0},
          std::uint64_t{600});
  EXPECT_EQ(await_grant(b, 100ms), std::nullopt);
  EXPECT_EQ(heard(link), (strings{"recall on"}));
  link->send(budget, lease_return_atom::value, std::uint64_t{1});
  EXPECT_EQ(await_grant(b), std::optional<bool>(true));
  EXPECT_EQ(heard(link), (strings{"recall off"}));
}

// While only the link's own asks wait (and no cap is reached), it keeps its slots: it hands them
// to its own waiters.
TEST_F(BudgetActorTest, NoRecallWhileOnlyTheLinkItselfWaits) {
  budget_limits l;
  l.global = 8;
  l.per_upstream = {8, 8};
  l.tokens_per_upstream = {1000};
  auto budget = system_.spawn(budget_actor, l, &stats_, nullptr);
  caf::scoped_actor link{system_};
  for (std::uint64_t id : {1, 2}) {
    link->send(budget, lease_atom::value, std::uint64_t{0}, std::int64_t{-1}, std::int64_t{0},
               std::uint64_t{600}, id);
  }
  EXPECT_EQ(heard(link), (strings{"grant 1"}));
  link->send(budget, lease_return_atom::value, std::uint64_t{1});
  EXPECT_EQ(heard(link), (strings{"grant 2"}));
}

// At a cap, a link holding a slot is recalled; below every cap again, the recall is lifted.
TEST_F(BudgetActorTest, ALinkIsRecalledWhileACapIsReached) {
  auto budget = spawn_budget(8, {1, 1});
  caf::scoped_actor link{system_};
  lease(link, budget, 1);
  EXPECT_EQ(heard(link), (strings{"grant 1", "recall on upstream 0"}));
  link->send(budget, lease_return_atom::value, std::uint64_t{1});
  EXPECT_EQ(heard(link), (strings{"recall off upstream 0"}));
}

TEST_F(BudgetActorTest, AWithdrawnAskNeverTakesASlot) {
  auto budget = spawn_budget(8, {1, 1});
  auto a = std::make_unique<caf::scoped_actor>(system_);
  caf::scoped_actor link{system_}, c{system_};
  ASSERT_EQ(acquire(*a, budget, 0), std::optional<bool>(true));
  lease(link, budget, 7);
  EXPECT_EQ(heard(link), strings{});
  EXPECT_EQ(stats_.queue_depth(), 0);  // a member's ask is that member's queue, not this node's
  link->send(budget, lease_return_atom::value, std::uint64_t{7});
  a.reset();
  EXPECT_EQ(acquire(c, budget, 0), std::optional<bool>(true));
  EXPECT_EQ(heard(link), strings{});
}

TEST_F(BudgetActorTest, LeaseAsksQueueInPriorityOrderWithOtherWaiters) {
  auto budget = spawn_budget(8, {1, 1});
  auto a = std::make_unique<caf::scoped_actor>(system_);
  caf::scoped_actor link{system_}, b{system_};
  ASSERT_EQ(acquire(*a, budget, 0), std::optional<bool>(true));
  b->send(budget, acquire_atom::value, std::uint64_t{0}, std::int64_t{-1}, std::int64_t{20},
          std::uint64_t{0});
  link->send(budget, lease_atom::value, std::uint64_t{0}, std::int64_t{-1}, std::int64_t{10},
             std::uint64_t{0}, std::uint64_t{3});  // an older request: ahead of b
  EXPECT_EQ(heard(link), strings{});
  a.reset();
  // b still waits, and upstream 0 is at its cap.
  EXPECT_EQ(heard(link), (strings{"grant 3", "recall on", "recall on upstream 0"}));
  EXPECT_EQ(await_grant(b, 100ms), std::nullopt);
}

}  // namespace
}  // namespace tether
