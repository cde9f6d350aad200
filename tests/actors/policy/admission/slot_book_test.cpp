// Unit tests for slot_book: the budget's count of held slots and its admission queue.
#include "actors/policy/admission/slot_book.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace tether {
namespace {

using holder = slot_book::holder;
using holders = std::vector<holder>;

slot_book book(std::uint32_t global, std::vector<std::uint32_t> per_upstream,
               std::vector<std::uint32_t> per_key = {}, std::uint32_t queue_max = 16) {
  return slot_book({global, std::move(per_upstream), std::move(per_key), queue_max, {}, {}});
}

holders granted(const slot_book::actions& a) {
  holders out;
  for (const auto& g : a.grants) out.push_back(g.who);
  return out;
}

// "9 on all", "9 off upstream 0", "7 on key 1": each recall, in order.
std::vector<std::string> recalls_of(const slot_book::actions& a) {
  std::vector<std::string> out;
  for (const auto& r : a.recalls) {
    std::string s = std::to_string(r.link) + (r.on ? " on " : " off ");
    if (r.scope == recall_scope::all) {
      s += "all";
    } else {
      s += (r.scope == recall_scope::upstream ? "upstream " : "key ") + std::to_string(r.index);
    }
    out.push_back(std::move(s));
  }
  return out;
}

holders refused(const slot_book::actions& a) {
  holders out;
  for (const auto& r : a.refusals) out.push_back(r.who);
  return out;
}

// Connection actor `who` asks for a slot on `upstream` (key -1, rank 0 unless given).
slot_book::actions ask(slot_book& b, slot_book::owner who, std::uint64_t upstream,
                       std::int64_t key = -1, std::int64_t rank = 0, std::int64_t now = 0) {
  return b.acquire(who, upstream, key, rank, 0, true, now);
}

TEST(SlotBookTest, AnAskWithinEveryCapIsGrantedAtOnceWithoutWaiting) {
  auto b = book(8, {2, 2});
  auto a = ask(b, 1, 0, -1, 0, 1000);
  ASSERT_EQ(a.grants.size(), 1u);
  EXPECT_EQ(a.grants[0].who, (holder{1, 0}));
  EXPECT_EQ(a.grants[0].what, (slot_book::claim{0, -1}));
  EXPECT_TRUE(a.grants[0].local);
  EXPECT_EQ(a.grants[0].waited_ns, 0);
  EXPECT_FALSE(a.queued);
  EXPECT_FALSE(a.queue_changed);  // the queue was not touched: its depth is not republished
  EXPECT_EQ(b.held(), 1u);
  EXPECT_EQ(b.held_on_upstream(0), 1u);
  EXPECT_EQ(b.held_on_upstream(1), 0u);
  EXPECT_TRUE(b.knows({1, 0}));
}

TEST(SlotBookTest, AnUpstreamAtItsCapQueuesTheNextAskWhileAnotherUpstreamStillGrants) {
  auto b = book(8, {1, 1});
  ask(b, 1, 0);
  auto queued = ask(b, 2, 0);
  EXPECT_TRUE(queued.grants.empty());
  EXPECT_TRUE(queued.refusals.empty());
  ASSERT_TRUE(queued.queued);
  EXPECT_TRUE(queued.queue_changed);
  EXPECT_EQ(b.waiting(), 1u);
  EXPECT_EQ(b.waiting_local(), 1u);
  EXPECT_EQ(granted(ask(b, 3, 1)), (holders{{3, 0}}));
}

TEST(SlotBookTest, TheGlobalCapSpansUpstreams) {
  auto b = book(2, {5, 5});
  EXPECT_EQ(granted(ask(b, 1, 0)), (holders{{1, 0}}));
  EXPECT_EQ(granted(ask(b, 2, 1)), (holders{{2, 0}}));
  auto third = ask(b, 3, 1);
  EXPECT_TRUE(third.grants.empty());
  EXPECT_TRUE(third.queued);
  EXPECT_EQ(b.held(), 2u);
}

TEST(SlotBookTest, AKeyAtItsCapQueuesWhileAnUncappedKeyOrNoKeyIsGranted) {
  auto b = book(8, {5, 5}, {1, 0});
  EXPECT_EQ(granted(ask(b, 1, 0, 0)), (holders{{1, 0}}));
  EXPECT_TRUE(ask(b, 2, 0, 0).queued);                     // key 0 capped at 1
  EXPECT_EQ(granted(ask(b, 3, 0, 1)), (holders{{3, 0}}));  // key 1: cap 0 = none
  EXPECT_EQ(granted(ask(b, 4, 0, 1)), (holders{{4, 0}}));
  EXPECT_EQ(granted(ask(b, 5, 0, -1)), (holders{{5, 0}}));  // no key
  EXPECT_EQ(granted(ask(b, 6, 0, 9)), (holders{{6, 0}}));   // a key beyond the caps: none
  EXPECT_EQ(b.held_on_key(0), 1u);
  EXPECT_EQ(b.held_on_key(1), 2u);
}

// The cap is reached when the count equals it: one below still fits.
TEST(SlotBookTest, AClaimFitsUpToTheLastSlotOfEachCapAndNotBeyond) {
  auto b = book(3, {2, 3}, {2});
  EXPECT_TRUE(b.fits({0, 0}));
  ask(b, 1, 0, 0);
  EXPECT_TRUE(b.fits({0, 0}));
  ask(b, 2, 0, 0);
  EXPECT_FALSE(b.fits({0, -1}));  // upstream 0 full
  EXPECT_FALSE(b.fits({1, 0}));   // key 0 full
  EXPECT_TRUE(b.fits({1, -1}));
  ask(b, 3, 1);
  EXPECT_FALSE(b.fits({1, -1}));  // global full
  EXPECT_EQ(b.held(), 3u);
}

TEST(SlotBookTest, AnUpstreamBeyondTheCapsCountsAsUpstreamZero) {
  auto b = book(8, {1, 1});
  auto a = ask(b, 1, 7);
  ASSERT_EQ(a.grants.size(), 1u);
  EXPECT_EQ(a.grants[0].what.upstream, 0u);
  EXPECT_EQ(b.held_on_upstream(0), 1u);
  EXPECT_TRUE(ask(b, 2, 0).queued);  // upstream 0 is full now
  EXPECT_EQ(b.held_by({1, 0}), (slot_book::claim{0, -1}));
}

TEST(SlotBookTest, WithoutPerUpstreamCapsEveryClaimCountsOnUpstreamZero) {
  auto b = book(2, {});
  EXPECT_EQ(granted(ask(b, 1, 3)), (holders{{1, 0}}));
  EXPECT_EQ(b.held_on_upstream(0), 1u);
}

TEST(SlotBookTest, AskingAgainForAHeldOrQueuedSlotChangesNothing) {
  auto b = book(1, {1, 1});
  ask(b, 1, 0);
  ask(b, 2, 0);
  auto again_held = ask(b, 1, 0);
  auto again_queued = ask(b, 2, 0);
  EXPECT_TRUE(again_held.grants.empty() && again_held.refusals.empty() && !again_held.queued);
  EXPECT_TRUE(again_queued.grants.empty() && again_queued.refusals.empty() && !again_queued.queued);
  EXPECT_EQ(b.held(), 1u);
  EXPECT_EQ(b.waiting(), 1u);
}

TEST(SlotBookTest, AFullQueueRefusesTheNextAskAtOnceWithoutQueueingIt) {
  auto b = book(1, {1, 1}, {}, 1);
  ask(b, 1, 0);
  EXPECT_TRUE(ask(b, 2, 0).queued);
  auto a = ask(b, 3, 0);
  ASSERT_EQ(a.refusals.size(), 1u);
  EXPECT_EQ(a.refusals[0].who, (holder{3, 0}));
  EXPECT_EQ(a.refusals[0].reason, "admission queue is full");
  EXPECT_EQ(a.refusals[0].why, slot_refusal::no_room);  // final: no other upstream would fit it
  EXPECT_FALSE(a.queued);
  EXPECT_FALSE(b.knows({3, 0}));
  EXPECT_EQ(b.waiting(), 1u);
}

TEST(SlotBookTest, AFullQueueStillGrantsAnAskThatFits) {
  auto b = book(8, {1, 1}, {}, 0);
  ask(b, 1, 0);
  EXPECT_EQ(refused(ask(b, 2, 0)), (holders{{2, 0}}));
  EXPECT_EQ(granted(ask(b, 3, 1)), (holders{{3, 0}}));
}

TEST(SlotBookTest, AGivenBackSlotGoesToTheOldestWaiterWithTheTimeItWaited) {
  auto b = book(8, {1, 1});
  ask(b, 1, 0, -1, 0, 0);
  ask(b, 2, 0, -1, 0, 1000);
  ask(b, 3, 0, -1, 0, 1100);
  auto a = b.give_back({1, 0}, 1750);
  ASSERT_EQ(a.released.size(), 1u);
  EXPECT_TRUE(a.released[0].local);
  ASSERT_EQ(a.grants.size(), 1u);
  EXPECT_EQ(a.grants[0].who, (holder{2, 0}));
  EXPECT_EQ(a.grants[0].waited_ns, 750);
  EXPECT_TRUE(a.queue_changed);
  EXPECT_EQ(b.waiting(), 1u);
  EXPECT_EQ(b.held(), 1u);
}

TEST(SlotBookTest, WaitersOfOneRankAreServedInTheOrderTheyAsked) {
  auto b = book(1, {1, 1});
  ask(b, 1, 0);
  for (slot_book::owner w = 2; w <= 4; ++w) ask(b, w, 0, -1, 5);
  holders order;
  for (slot_book::owner gone = 1; gone <= 3; ++gone) {
    for (const auto& g : b.owner_gone(gone, 0).grants) order.push_back(g.who);
  }
  EXPECT_EQ(order, (holders{{2, 0}, {3, 0}, {4, 0}}));
}

// A retry carries its request's early arrival as its rank.
TEST(SlotBookTest, ARetryOfAnOlderRequestGoesBeforeNewerRequestsQueuedEarlier) {
  auto b = book(1, {1, 1});
  ask(b, 1, 0, -1, 0);
  ask(b, 2, 0, -1, 200);  // a newer request
  ask(b, 3, 0, -1, 100);  // the retry of an older one, asked later
  EXPECT_EQ(granted(b.owner_gone(1, 0)), (holders{{3, 0}}));
  EXPECT_EQ(granted(b.owner_gone(3, 0)), (holders{{2, 0}}));
}

TEST(SlotBookTest, AFreedSlotSkipsAnOlderWaiterThatDoesNotFitForAYoungerOneThatDoes) {
  auto b = book(2, {1, 2});
  ask(b, 1, 0);  // upstream 0 full
  ask(b, 2, 1);  // global full
  ask(b, 3, 0);  // older, but upstream 0 stays full
  ask(b, 4, 1);
  auto a = b.owner_gone(2, 0);
  EXPECT_EQ(granted(a), (holders{{4, 0}}));
  EXPECT_TRUE(b.knows({3, 0}));
  EXPECT_EQ(b.waiting(), 1u);
}

TEST(SlotBookTest, AFreedSlotGrantsNoMoreWaitersThanTheGlobalCapAllows) {
  auto b = book(2, {2, 2});
  ask(b, 1, 0);
  ask(b, 2, 1);
  ask(b, 3, 0);
  ask(b, 4, 1);
  EXPECT_EQ(granted(b.owner_gone(1, 0)), (holders{{3, 0}}));
  EXPECT_EQ(b.held(), 2u);
  EXPECT_EQ(b.waiting(), 1u);
}

TEST(SlotBookTest, AWaiterThatTimesOutIsRefusedAndLeavesTheQueue) {
  auto b = book(1, {1, 1});
  ask(b, 1, 0);
  auto t = ask(b, 2, 0).queued;
  ASSERT_TRUE(t);
  auto a = b.timed_out(*t);
  ASSERT_EQ(a.refusals.size(), 1u);
  EXPECT_EQ(a.refusals[0].who, (holder{2, 0}));
  EXPECT_EQ(a.refusals[0].reason, "waited longer than budget.queue_timeout_ms for a slot");
  EXPECT_EQ(a.refusals[0].why, slot_refusal::no_room);
  EXPECT_TRUE(a.queue_changed);
  EXPECT_FALSE(b.knows({2, 0}));
  EXPECT_EQ(b.waiting_local(), 0u);
  EXPECT_TRUE(b.owner_gone(1, 0).grants.empty());
}

TEST(SlotBookTest, ATimeoutForAWaiterAlreadyServedDoesNothing) {
  auto b = book(1, {1, 1});
  ask(b, 1, 0);
  auto t = ask(b, 2, 0).queued;
  ASSERT_TRUE(t);
  b.owner_gone(1, 0);
  auto a = b.timed_out(*t);
  EXPECT_TRUE(a.refusals.empty());
  EXPECT_FALSE(a.queue_changed);
  EXPECT_EQ(b.held_by({2, 0}), (slot_book::claim{0, -1}));
}

TEST(SlotBookTest, AQueuedWaiterThatGoesAwayNeverTakesTheSlot) {
  auto b = book(1, {1, 1});
  ask(b, 1, 0);
  ask(b, 2, 0);
  ask(b, 3, 0);
  auto away = b.owner_gone(2, 0);
  EXPECT_TRUE(away.grants.empty() && away.refusals.empty() && away.released.empty());
  EXPECT_TRUE(away.queue_changed);
  EXPECT_EQ(granted(b.owner_gone(1, 0)), (holders{{3, 0}}));
  EXPECT_EQ(b.held(), 1u);
}

TEST(SlotBookTest, AWithdrawnAskLeavesTheQueueUnansweredAndNeverTakesASlot) {
  auto b = book(8, {1, 1});
  ask(b, 1, 0);
  b.lease(9, 7, 0, -1, 0, 0, 0);
  auto w = b.give_back({9, 7}, 0);
  EXPECT_TRUE(w.grants.empty() && w.refusals.empty() && w.released.empty());
  EXPECT_TRUE(w.queue_changed);
  EXPECT_EQ(b.waiting(), 0u);
  EXPECT_TRUE(b.owner_gone(1, 0).grants.empty());
  EXPECT_EQ(b.held(), 0u);
}

TEST(SlotBookTest, GivingBackWhatNobodyHoldsOrAwaitsChangesNothing) {
  auto b = book(8, {1, 1});
  ask(b, 1, 0);
  auto a = b.give_back({2, 0}, 0);
  EXPECT_TRUE(a.released.empty() && a.grants.empty() && a.recalls.empty());
  EXPECT_FALSE(a.queue_changed);
  EXPECT_EQ(b.held(), 1u);
}

TEST(SlotBookTest, LeasesCountAgainstTheCapsButNotAsThisNodesWork) {
  auto b = book(8, {2, 2});
  auto l1 = b.lease(9, 1, 0, -1, 0, 0, 0);
  auto l2 = b.lease(9, 2, 0, -1, 0, 0, 0);
  ASSERT_EQ(l1.grants.size(), 1u);
  EXPECT_EQ(l1.grants[0].who, (holder{9, 1}));
  EXPECT_FALSE(l1.grants[0].local);
  EXPECT_EQ(granted(l2), (holders{{9, 2}}));
  EXPECT_EQ(b.held_on_upstream(0), 2u);
  EXPECT_TRUE(b.is_lessee(9));
  EXPECT_TRUE(ask(b, 3, 0).queued);
  EXPECT_EQ(b.waiting_local(), 1u);
}

TEST(SlotBookTest, ALeaseUnderIdZeroIsIgnored) {
  auto b = book(8, {2, 2});
  auto a = b.lease(9, 0, 0, -1, 0, 0, 0);
  EXPECT_TRUE(a.grants.empty() && !a.queued);
  EXPECT_FALSE(b.is_lessee(9));
}

TEST(SlotBookTest, ALinksAskQueuedIsNotCountedAsThisNodesQueue) {
  auto b = book(1, {1, 1});
  ask(b, 1, 0);
  EXPECT_TRUE(b.lease(9, 7, 0, -1, 0, 0, 0).queued);
  EXPECT_EQ(b.waiting(), 1u);
  EXPECT_EQ(b.waiting_local(), 0u);
  EXPECT_TRUE(b.acquire(2, 0, -1, 0, 0, false, 0).queued);  // another node's connection actor
  EXPECT_EQ(b.waiting_local(), 0u);
}

TEST(SlotBookTest, ALinksEndFreesAllItsLeasesAndWithdrawsItsAsks) {
  auto b = book(3, {3, 3});
  b.lease(9, 1, 0, -1, 0, 0, 0);
  b.lease(9, 2, 0, -1, 0, 0, 0);
  ask(b, 1, 0);
  b.lease(9, 3, 0, -1, 0, 0, 0);  // queued
  ask(b, 2, 0, -1, 0, 10);        // queued
  auto a = b.owner_gone(9, 50);
  EXPECT_EQ(a.released.size(), 2u);
  EXPECT_EQ(granted(a), (holders{{2, 0}}));
  EXPECT_EQ(a.grants[0].waited_ns, 40);
  EXPECT_TRUE(a.recalls.empty());
  EXPECT_FALSE(b.is_lessee(9));
  EXPECT_FALSE(b.knows({9, 3}));
  EXPECT_EQ(b.held(), 2u);
  EXPECT_EQ(b.waiting(), 0u);
}

// A waiter behind the token cap (no slot cap is reached): the link is recalled for it.
TEST(SlotBookTest, ALinkHoldingSlotsIsRecalledWhileSomeoneElseWaitsAndReleasedAfter) {
  auto b = slot_book({8, {8}, {}, 16, {1000}, {}});
  EXPECT_TRUE(b.lease(9, 1, 0, -1, 0, 600, 0).recalls.empty());
  auto a = b.acquire(2, 0, -1, 0, 600, true, 0);
  EXPECT_TRUE(a.queued);
  ASSERT_EQ(a.recalls.size(), 1u);
  EXPECT_EQ(a.recalls[0].link, 9u);
  EXPECT_TRUE(a.recalls[0].on);
  auto back = b.give_back({9, 1}, 0);
  EXPECT_EQ(granted(back), (holders{{2, 0}}));
  ASSERT_EQ(back.recalls.size(), 1u);
  EXPECT_FALSE(back.recalls[0].on);
}

TEST(SlotBookTest, ALinkIsNotRecalledWhileOnlyItsOwnAsksWait) {
  auto b = slot_book({8, {8}, {}, 16, {1000}, {}});
  b.lease(9, 1, 0, -1, 0, 600, 0);
  auto own = b.lease(9, 2, 0, -1, 0, 600, 0);
  EXPECT_TRUE(own.queued);
  EXPECT_TRUE(own.recalls.empty());
  auto back = b.give_back({9, 1}, 0);
  EXPECT_EQ(granted(back), (holders{{9, 2}}));
  EXPECT_TRUE(back.recalls.empty());
}

// At a cap, whoever asks next cannot be served, and may not even be let wait (a full queue, a
// queue_max of 0): no lessee may keep a slot idle then. Below every cap again, it may.
TEST(SlotBookTest, ALinkIsRecalledWhileACapIsReachedAndReleasedBelowIt) {
  for (int which = 0; which < 3; ++which) {
    auto b = slot_book(
        {which == 0 ? 2u : 8u, {which == 1 ? 2u : 8u}, {which == 2 ? 2u : 0u}, 0, {}, {}});
    const std::string scope = which == 0 ? "all" : which == 1 ? "upstream 0" : "key 0";
    EXPECT_TRUE(b.lease(9, 1, 0, 0, 0, 0, 0).recalls.empty()) << which;
    auto full = b.lease(9, 2, 0, 0, 0, 0, 0);
    EXPECT_EQ(recalls_of(full), std::vector<std::string>{"9 on " + scope});
    auto back = b.give_back({9, 1}, 1);
    EXPECT_EQ(recalls_of(back), std::vector<std::string>{"9 off " + scope});
  }
  // A key's cap recalls every lessee's slots of that key, and only those.
  auto b = slot_book({8, {8}, {1, 0}, 0, {}, {}});
  b.lease(9, 1, 0, 1, 0, 0, 0);  // key 1 has no cap
  auto full = b.lease(7, 1, 0, 0, 0, 0, 0);
  EXPECT_EQ(recalls_of(full), (std::vector<std::string>{"7 on key 0", "9 on key 0"}));
}

// Nothing to give back: the link is told once it holds a slot.
TEST(SlotBookTest, ALinkHoldingNoSlotIsNotRecalledUntilItHoldsOne) {
  auto b = book(8, {1, 1});
  ask(b, 1, 0);
  EXPECT_TRUE(b.lease(9, 1, 0, -1, 0, 0, 0).recalls.empty());
  auto other = ask(b, 2, 0);
  EXPECT_TRUE(other.recalls.empty());
  auto a = b.owner_gone(1, 0);  // the link's ask is older: it takes the slot, 2 still waits
  EXPECT_EQ(granted(a), (holders{{9, 1}}));
  // Recalled for all it holds (2 waits), and for upstream 0's slots (its cap is reached).
  EXPECT_EQ(recalls_of(a), (std::vector<std::string>{"9 on all", "9 on upstream 0"}));
}

// A reload lowered a cap below what lessees hold: they are recalled (a kept slot reused would
// start work beyond the new cap) until the count is below every cap again.
TEST(SlotBookTest, ALinkIsRecalledWhileMoreIsHeldThanALoweredCapAllows) {
  for (int which = 0; which < 3; ++which) {
    auto b = slot_book({8, {4}, {4}, 16, {}, {}});
    for (slot_book::lease_id id = 1; id <= 3; ++id) b.lease(9, id, 0, 0, 0, 0, 0);
    slot_book::caps lowered{8, {4}, {4}, 16, {}, {}};
    if (which == 0) lowered.global = 2;
    if (which == 1) lowered.per_upstream = {2};
    if (which == 2) lowered.per_key = {2};
    const std::string scope = which == 0 ? "all" : which == 1 ? "upstream 0" : "key 0";
    auto act = b.set_caps(lowered, 1);
    EXPECT_EQ(recalls_of(act), std::vector<std::string>{"9 on " + scope});
    EXPECT_TRUE(b.give_back({9, 1}, 2).recalls.empty()) << which;  // 2 held: at the cap
    auto back = b.give_back({9, 2}, 3);                            // 1 held: below
    EXPECT_EQ(recalls_of(back), std::vector<std::string>{"9 off " + scope});
  }
  // Below the caps after the reload: nobody is recalled.
  auto b = book(8, {4});
  b.lease(9, 1, 0, -1, 0, 0, 0);
  EXPECT_TRUE(b.set_caps({3, {3}, {}, 16, {}, {}}, 1).recalls.empty());
}

TEST(SlotBookTest, ALeaseAskQueuesInRankOrderWithConnectionActors) {
  auto b = book(8, {1, 1});
  ask(b, 1, 0);
  ask(b, 2, 0, -1, 20);
  b.lease(9, 3, 0, -1, 10, 0, 0);  // an older request: ahead of 2
  EXPECT_EQ(granted(b.owner_gone(1, 0)), (holders{{9, 3}}));
  EXPECT_TRUE(b.knows({2, 0}));
}

// The invariant admission relies on: after every event no waiter fits (a freed slot went to the
// oldest waiters that fit), and no count exceeds its cap.
// The drain's end: a slot freed by a stopping request must not start upstream work for a
// waiter whose own stop is still on its way (the drain test saw three upstream requests for two).
TEST(SlotBookTest, RefusingLocalWorkRefusesItsWaitersAndLaterAsksButNotLeases) {
  auto b = book(1, {1});
  ask(b, 1, 0);
  ask(b, 2, 0);
  b.lease(9, 5, 0, -1, 0, 0, 0);
  ask(b, 3, 0);
  ASSERT_EQ(b.waiting(), 3u);
  auto stop = b.refuse_local("the gateway is shutting down");
  EXPECT_EQ(refused(stop), (holders{{2, 0}, {3, 0}}));
  EXPECT_EQ(stop.refusals[0].reason, "the gateway is shutting down");
  EXPECT_EQ(stop.refusals[0].why, slot_refusal::stopping);
  EXPECT_TRUE(stop.queue_changed);
  EXPECT_EQ(b.waiting_local(), 0u);
  EXPECT_EQ(b.waiting(), 1u);  // the member's lease still waits
  // The holder's end frees the slot: the member's lease takes it, no local waiter does.
  auto freed = b.owner_gone(1, 10);
  EXPECT_EQ(granted(freed), (holders{{9, 5}}));
  auto late = ask(b, 4, 0);
  EXPECT_EQ(refused(late), (holders{{4, 0}}));
  EXPECT_EQ(late.refusals[0].why, slot_refusal::stopping);
  EXPECT_FALSE(late.queued);
  EXPECT_FALSE(b.knows({4, 0}));
}

TEST(SlotBookTest, NoWaiterFitsAndNoCapIsExceededUnderRandomTraffic) {
  const std::vector<std::uint32_t> per_upstream{2, 3};
  const std::vector<std::uint32_t> per_key{1, 0, 2};
  slot_book b({4, per_upstream, per_key, 6, {}, {}});
  std::mt19937_64 rng(26);
  std::map<holder, slot_book::claim> asked;  // everything asked and not yet answered no or gone
  std::map<holder, slot_book::ticket> tickets;
  std::int64_t now = 0;
  slot_book::owner next_owner = 1;
  auto note = [&](const slot_book::actions& a) {
    for (const auto& r : a.refusals) {
      asked.erase(r.who);
      tickets.erase(r.who);
    }
    for (const auto& g : a.grants) tickets.erase(g.who);
  };
  for (int step = 0; step < 20000; ++step) {
    now += 1;
    auto pick = std::uniform_int_distribution<int>(0, 9)(rng);
    std::uint64_t upstream = std::uniform_int_distribution<int>(0, 2)(rng);
    std::int64_t key = std::uniform_int_distribution<int>(-1, 3)(rng);
    std::int64_t rank = std::uniform_int_distribution<int>(0, 5)(rng);
    if (pick < 4) {
      holder h{next_owner++, 0};
      asked[h] = {upstream, key};
      auto a = b.acquire(h.who, upstream, key, rank, 0, true, now);
      if (a.queued) tickets[h] = *a.queued;
      note(a);
    } else if (pick < 6) {
      holder h{1000000, std::uniform_int_distribution<slot_book::lease_id>(1, 8)(rng)};
      if (!b.knows(h)) asked[h] = {upstream, key};
      auto a = b.lease(h.who, h.id, upstream, key, rank, 0, now);
      if (a.queued) tickets[h] = *a.queued;
      note(a);
    } else if (!asked.empty()) {
      auto it = asked.begin();
      std::advance(it, std::uniform_int_distribution<std::size_t>(0, asked.size() - 1)(rng));
      auto h = it->first;
      if (pick < 8) {
        asked.erase(it);
        tickets.erase(h);
        note(h.id == 0 ? b.owner_gone(h.who, now) : b.give_back(h, now));
      } else if (auto t = tickets.find(h); t != tickets.end()) {
        note(b.timed_out(t->second));
      }
    }
    ASSERT_LE(b.held(), 4u);
    for (std::size_t u = 0; u < per_upstream.size(); ++u) {
      ASSERT_LE(b.held_on_upstream(u), per_upstream[u]);
    }
    ASSERT_LE(b.held_on_key(0), 1u);
    ASSERT_LE(b.held_on_key(2), 2u);
    ASSERT_LE(b.waiting(), 6u);
    for (const auto& [h, t] : tickets) {
      auto c = asked.at(h);
      slot_book::claim normal{c.upstream < per_upstream.size() ? c.upstream : 0, c.key};
      ASSERT_FALSE(b.fits(normal)) << "step " << step << ": a waiter fits but was not served";
    }
  }
}

// A reload's caps (set_caps): a raised cap admits the oldest waiters that now fit, at once.
TEST(SlotBookTest, RaisedCapsAdmitTheWaitersThatNowFit) {
  auto b = book(8, {1});
  ask(b, 1, 0);
  ask(b, 2, 0, -1, 1);
  ask(b, 3, 0, -1, 2);
  ASSERT_EQ(b.waiting(), 2u);
  auto act = b.set_caps({8, {2}, {}, 16, {}, {}}, 5);
  EXPECT_EQ(granted(act), (holders{{2, 0}}));
  EXPECT_TRUE(act.queue_changed);
  EXPECT_EQ(b.waiting(), 1u);
  EXPECT_EQ(b.held_on_upstream(0), 2u);
}

// A lowered cap takes nothing back: the slots held stay held, and none is granted until the
// count is under the new cap.
TEST(SlotBookTest, LoweredCapsKeepTheSlotsHeldAndGrantOnlyUnderTheNewCap) {
  auto b = book(8, {3});
  ask(b, 1, 0);
  ask(b, 2, 0);
  ask(b, 3, 0);
  auto act = b.set_caps({8, {1}, {}, 16, {}, {}}, 0);
  EXPECT_TRUE(act.grants.empty());
  EXPECT_TRUE(act.released.empty());
  EXPECT_EQ(b.held(), 3u);
  EXPECT_TRUE(granted(ask(b, 4, 0)).empty());
  EXPECT_TRUE(b.give_back({1, 0}, 0).grants.empty());
  EXPECT_TRUE(b.give_back({2, 0}, 0).grants.empty());
  EXPECT_EQ(granted(b.give_back({3, 0}, 0)), (holders{{4, 0}}));
}

// New upstreams and keys (appended by a reload) are counted under their own caps, and those
// counted before keep their counts.
TEST(SlotBookTest, UpstreamsAndKeysAddedByNewCapsAreCountedUnderTheirOwnCaps) {
  auto b = book(8, {2}, {0});
  ask(b, 1, 0, 0);
  b.set_caps({8, {4, 1}, {0, 1}, 16, {}, {}}, 0);
  EXPECT_EQ(b.held_on_upstream(0), 1u);
  EXPECT_EQ(granted(ask(b, 2, 1)), (holders{{2, 0}}));
  EXPECT_TRUE(granted(ask(b, 3, 1)).empty());  // upstream 1 is at its cap of 1
  EXPECT_EQ(granted(ask(b, 4, 0, 1)), (holders{{4, 0}}));
  EXPECT_TRUE(granted(ask(b, 5, 0, 1)).empty());  // key 1 is at its cap of 1
  EXPECT_EQ(b.held_on_key(1), 1u);
}

}  // namespace
}  // namespace tether

namespace tether {
namespace {

// Tokens (max_tokens_in_flight): the weight is held with the slot and freed with it.
slot_book token_book(std::vector<std::uint64_t> token_caps, std::uint32_t per_upstream = 8) {
  return slot_book({16,
                    std::vector<std::uint32_t>(token_caps.size(), per_upstream),
                    {},
                    16,
                    std::move(token_caps),
                    {}});
}

slot_book::actions ask_tokens(slot_book& b, slot_book::owner who, std::uint64_t upstream,
                              std::uint64_t tokens, std::int64_t rank = 0, std::int64_t now = 0) {
  return b.acquire(who, upstream, -1, rank, tokens, true, now);
}

TEST(SlotBookTokensTest, AWeightIsHeldWithItsSlotUntilTheSlotIsFreed) {
  auto b = token_book({1000, 0});
  EXPECT_EQ(granted(ask_tokens(b, 1, 0, 600)), (holders{{1, 0}}));
  EXPECT_EQ(b.tokens_on_upstream(0), 600u);
  // 600 more would be 1200 > 1000: queued though a slot is free.
  auto second = ask_tokens(b, 2, 0, 600, 1);
  EXPECT_TRUE(second.queued);
  EXPECT_TRUE(granted(second).empty());
  // The upstream without a token cap counts slots only.
  EXPECT_EQ(granted(ask_tokens(b, 3, 1, 5000)), (holders{{3, 0}}));
  auto freed = b.owner_gone(1, 10);
  ASSERT_EQ(freed.released.size(), 1u);
  EXPECT_EQ(freed.released[0].what.tokens, 600u);
  EXPECT_EQ(granted(freed), (holders{{2, 0}}));
  EXPECT_EQ(b.tokens_on_upstream(0), 600u);
  b.give_back({2, 0}, 20);
  EXPECT_EQ(b.tokens_on_upstream(0), 0u);
  EXPECT_EQ(b.held(), 1u);
}

TEST(SlotBookTokensTest, AClaimHeavierThanTheWholeCapIsRefusedAtOnceAndNeverQueued) {
  auto b = token_book({1000});
  auto a = ask_tokens(b, 1, 0, 1001);
  ASSERT_EQ(refused(a), (holders{{1, 0}}));
  EXPECT_NE(a.refusals[0].reason.find("max_tokens_in_flight (1000)"), std::string::npos);
  // Told apart from a full queue: another upstream's cap may hold it.
  EXPECT_EQ(a.refusals[0].why, slot_refusal::too_heavy);
  EXPECT_FALSE(a.queued);
  EXPECT_FALSE(b.knows({1, 0}));
  EXPECT_EQ(granted(ask_tokens(b, 2, 0, 1000)), (holders{{2, 0}}));  // exactly the cap fits
  // A lease is weighed the same way.
  auto leased = b.lease(9, 1, 0, -1, 0, 1500, 0);
  EXPECT_EQ(refused(leased), (holders{{9, 1}}));
  EXPECT_EQ(leased.refusals.at(0).why, slot_refusal::too_heavy);
}

// A heavy waiter is not starved by light claims that keep fitting beside it: on a token-capped
// upstream, younger asks wait behind it.
TEST(SlotBookTokensTest, LightClaimsDoNotOvertakeAHeavyWaiter) {
  auto b = token_book({1000});
  ask_tokens(b, 1, 0, 500);
  EXPECT_TRUE(ask_tokens(b, 2, 0, 900, 1).queued);
  // 100 would fit beside the 500, but the older 900 waits: the light one queues behind it.
  auto light = ask_tokens(b, 3, 0, 100, 2);
  EXPECT_TRUE(light.queued);
  EXPECT_TRUE(granted(light).empty());
  auto freed = b.owner_gone(1, 10);
  EXPECT_EQ(granted(freed), (holders{{2, 0}, {3, 0}}));  // 900 first, then the 100 beside it
  EXPECT_EQ(b.waiting(), 0u);
  EXPECT_EQ(b.held(), 2u);
  EXPECT_EQ(b.tokens_on_upstream(0), 1000u);
}

TEST(SlotBookTokensTest, ALightAskAdmittedAfterTheHeavyOneIsAlsoServedInOrder) {
  auto b = token_book({1000});
  ask_tokens(b, 1, 0, 500);
  ask_tokens(b, 2, 0, 900, 1);
  ask_tokens(b, 3, 0, 400, 2);
  ask_tokens(b, 4, 0, 50, 3);
  auto freed = b.owner_gone(1, 10);
  // 900 first; then 400 does not fit (1300) and holds back the 50 behind it.
  EXPECT_EQ(granted(freed), (holders{{2, 0}}));
  EXPECT_EQ(b.waiting(), 2u);
  EXPECT_EQ(granted(b.owner_gone(2, 20)), (holders{{3, 0}, {4, 0}}));
}

TEST(SlotBookTokensTest, AReloadLoweringTheCapRefusesTheWaitersThatCanNeverFit) {
  auto b = token_book({1000});
  ask_tokens(b, 1, 0, 800);
  ask_tokens(b, 2, 0, 700, 1);
  ask_tokens(b, 3, 0, 300, 2);
  auto act = b.set_caps({16, {8}, {}, 16, {500}, {}}, 5);
  EXPECT_EQ(refused(act), (holders{{2, 0}}));
  EXPECT_EQ(act.refusals.at(0).why, slot_refusal::too_heavy);
  EXPECT_TRUE(granted(act).empty());  // 800 held is past the new cap: it runs on
  EXPECT_EQ(b.waiting(), 1u);
  EXPECT_EQ(granted(b.owner_gone(1, 10)), (holders{{3, 0}}));
}

TEST(SlotBookTokensTest, TheTokenCapIsNeverExceededUnderRandomTraffic) {
  auto b = token_book({1000, 300}, 4);
  std::mt19937_64 rng(30);
  std::vector<holder> asked;
  slot_book::owner next = 1;
  for (int step = 0; step < 20000; ++step) {
    if (std::uniform_int_distribution<int>(0, 2)(rng) < 2) {
      auto upstream = std::uniform_int_distribution<std::uint64_t>(0, 1)(rng);
      auto tokens = std::uniform_int_distribution<std::uint64_t>(1, 1100)(rng);
      ask_tokens(b, next, upstream, tokens, step, step);
      if (b.knows({next, 0})) asked.push_back({next, 0});
      ++next;
    } else if (!asked.empty()) {
      auto i = std::uniform_int_distribution<std::size_t>(0, asked.size() - 1)(rng);
      b.owner_gone(asked[i].who, step);
      asked.erase(asked.begin() + static_cast<std::ptrdiff_t>(i));
    }
    ASSERT_LE(b.tokens_on_upstream(0), 1000u) << step;
    ASSERT_LE(b.tokens_on_upstream(1), 300u) << step;
    ASSERT_LE(b.held_on_upstream(0), 4u);
  }
}

// The fair queue: each key waits in its own lane, and freed slots go round the lanes in
// proportion to each key's weight.
slot_book fair_book(std::uint32_t global, std::vector<std::uint32_t> weights,
                    std::uint32_t queue_max = 200) {
  return slot_book({global, {}, {}, queue_max, {}, std::move(weights)});
}

// Frees the slot that `holder_of_slot` holds, `rounds` times over: each grant's holder is the
// next to give its slot back (one slot in turn, as under saturation). Returns the keys of the
// grants, in order.
std::vector<std::int64_t> serve_in_turn(slot_book& b, slot_book::owner holder_of_slot, int rounds) {
  std::vector<std::int64_t> keys;
  for (int i = 0; i < rounds; ++i) {
    auto a = b.owner_gone(holder_of_slot, i);
    if (a.grants.empty()) break;
    keys.push_back(a.grants[0].what.key);
    holder_of_slot = a.grants[0].who.who;
  }
  return keys;
}

TEST(SlotBookFairTest, AKeyThatQueuesMoreDoesNotMakeAnotherKeyWaitBehindIt) {
  auto b = fair_book(1, {});
  ask(b, 1, 0, 0);
  for (slot_book::owner w = 100; w < 130; ++w) ask(b, w, 0, 0, static_cast<std::int64_t>(w));
  // Key 1 arrives after all of key 0's requests: by arrival alone it would be served last.
  for (slot_book::owner w = 200; w < 203; ++w) ask(b, w, 0, 1, static_cast<std::int64_t>(w));
  auto keys = serve_in_turn(b, 1, 33);
  ASSERT_EQ(keys.size(), 33u);
  std::vector<std::size_t> places_of_key_1;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == 1) places_of_key_1.push_back(i);
  }
  // Turn about: key 1's three are served among the first six, not after key 0's thirty.
  EXPECT_EQ(places_of_key_1, (std::vector<std::size_t>{1, 3, 5}));
}

TEST(SlotBookFairTest, WeightsShareTheSlotsInProportionUnderSaturation) {
  auto b = fair_book(1, {3, 1});
  ask(b, 1, 0, 0);
  for (slot_book::owner w = 0; w < 60; ++w) {
    ask(b, 100 + w, 0, 0, static_cast<std::int64_t>(w));
    ask(b, 200 + w, 0, 1, static_cast<std::int64_t>(w));
  }
  auto keys = serve_in_turn(b, 1, 40);
  ASSERT_EQ(keys.size(), 40u);
  EXPECT_EQ(std::count(keys.begin(), keys.end(), 0), 30);
  EXPECT_EQ(std::count(keys.begin(), keys.end(), 1), 10);
  // And at every point, not only over the whole: each run of four holds three of key 0.
  for (std::size_t i = 0; i + 4 <= keys.size(); i += 4)
    EXPECT_EQ(std::count(keys.begin() + i, keys.begin() + i + 4, 0), 3) << "from grant " << i;
}

TEST(SlotBookFairTest, RequestsWithoutAKeyShareAsOneMoreKey) {
  auto b = fair_book(1, {});
  ask(b, 1, 0, 0);
  for (slot_book::owner w = 100; w < 110; ++w) ask(b, w, 0, 0, static_cast<std::int64_t>(w));
  for (slot_book::owner w = 200; w < 210; ++w) ask(b, w, 0, -1, static_cast<std::int64_t>(w));
  auto keys = serve_in_turn(b, 1, 6);
  EXPECT_EQ(keys, (std::vector<std::int64_t>{0, -1, 0, -1, 0, -1}));
}

TEST(SlotBookFairTest, AKeyIdleForAWhileBanksNoTurns) {
  auto b = fair_book(1, {});
  ask(b, 1, 0, 0);
  for (slot_book::owner w = 100; w < 120; ++w) ask(b, w, 0, 0, static_cast<std::int64_t>(w));
  // Key 0 alone is served ten times; key 1 was not waiting, so it is owed nothing for them.
  auto alone = serve_in_turn(b, 1, 10);
  ASSERT_EQ(alone.size(), 10u);
  for (slot_book::owner w = 200; w < 210; ++w) ask(b, w, 0, 1, static_cast<std::int64_t>(w));
  auto after = serve_in_turn(b, 109, 6);
  ASSERT_EQ(after.size(), 6u);
  EXPECT_EQ(std::count(after.begin(), after.end(), 1), 3);
}

TEST(SlotBookFairTest, AKeyServedThenEmptiedDoesNotGainATurnByAskingAgain) {
  // Key 1 keeps exactly one request waiting, asking again as soon as it is served (a closed
  // loop of one); key 0 keeps many. Weight 1 each: key 1 gets every other slot, not more.
  auto b = fair_book(1, {});
  ask(b, 1, 0, 0);
  for (slot_book::owner w = 100; w < 140; ++w) ask(b, w, 0, 0, static_cast<std::int64_t>(w));
  slot_book::owner next_of_key_1 = 300;
  ask(b, next_of_key_1++, 0, 1, 1000);
  slot_book::owner holding = 1;
  std::vector<std::int64_t> keys;
  for (int i = 0; i < 20; ++i) {
    auto a = b.owner_gone(holding, i);
    ASSERT_EQ(a.grants.size(), 1u);
    keys.push_back(a.grants[0].what.key);
    holding = a.grants[0].who.who;
    if (a.grants[0].what.key == 1) ask(b, next_of_key_1++, 0, 1, 1000 + i);
  }
  EXPECT_EQ(std::count(keys.begin(), keys.end(), 1), 10);
}

TEST(SlotBookFairTest, AHighRankJumpsItsOwnLaneOnly) {
  auto b = fair_book(1, {});
  ask(b, 1, 0, -1);
  ask(b, 10, 0, 0, 500);  // key 0, normal
  ask(b, 11, 0, 0, 501);
  ask(b, 20, 0, 1, 502);  // key 1, normal
  ask(b, 12, 0, 0, 5);    // key 0, asked last but of a higher class (a smaller rank)
  holders order;
  slot_book::owner holding = 1;
  for (int i = 0; i < 4; ++i) {
    auto a = b.owner_gone(holding, i);
    ASSERT_EQ(a.grants.size(), 1u);
    order.push_back(a.grants[0].who);
    holding = a.grants[0].who.who;
  }
  // 12 takes key 0's turn ahead of 10 and 11, and key 1's turn stays where it was.
  EXPECT_EQ(order, (holders{{12, 0}, {20, 0}, {10, 0}, {11, 0}}));
}

TEST(SlotBookFairTest, ALaneWhoseWaitersDoNotFitPassesItsTurnToOneThatDoes) {
  // Key 0 is at its own cap; key 1 is not: a freed slot goes to key 1 although key 0's turn.
  slot_book b({2, {}, {1, 0}, 16, {}, {}});
  ask(b, 1, 0, 0);
  ask(b, 2, 0, 1);
  ask(b, 3, 0, 0, 1);
  ask(b, 4, 0, 1, 2);
  EXPECT_EQ(granted(b.owner_gone(2, 0)), (holders{{4, 0}}));
  EXPECT_TRUE(b.knows({3, 0}));
  EXPECT_EQ(b.waiting_for_key(0), 1u);
  EXPECT_EQ(b.waiting_for_key(1), 0u);
}

TEST(SlotBookFairTest, ALeaseWaitsInTheLaneOfItsKey) {
  auto b = fair_book(1, {});
  ask(b, 1, 0, 0);
  for (slot_book::owner w = 100; w < 105; ++w) ask(b, w, 0, 0, static_cast<std::int64_t>(w));
  // A member's link asks for key 1 after them; it is served second, not sixth.
  EXPECT_TRUE(b.lease(900, 1, 0, 1, 1000, 0, 0).queued);
  auto first = b.owner_gone(1, 1);
  ASSERT_EQ(first.grants.size(), 1u);
  EXPECT_EQ(first.grants[0].what.key, 0);
  EXPECT_EQ(granted(b.owner_gone(first.grants[0].who.who, 2)), (holders{{900, 1}}));
}

}  // namespace
}  // namespace tether
