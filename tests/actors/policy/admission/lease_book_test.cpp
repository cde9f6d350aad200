// Unit tests for lease_book: the slots a cluster member leases from the budget host.
#include "actors/policy/admission/lease_book.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace tether {
namespace {

using pool_key = lease_book::pool_key;

const pool_key pool_a{0, -1};
const pool_key pool_b{1, -1};
const pool_key pool_a_keyed{0, 7};

// asks_out() never exceeds waiting(): an ask with no waiter behind it would hold a host slot
// nobody uses.
void expect_asks_within_waiters(const lease_book& b) {
  EXPECT_LE(b.asks_out(), b.waiting());
}

std::vector<lease_book::holder> granted_to(const lease_book::actions& a) {
  std::vector<lease_book::holder> out;
  for (const auto& g : a.grants) out.push_back(g.who);
  return out;
}

bool nothing(const lease_book::actions& a) {
  return a.grants.empty() && a.refusals.empty() && a.asks.empty() && a.returns.empty() &&
         a.work_ended.empty();
}

// Holder `who` of pool `k` gets a slot granted by the host (nobody else waits there); returns
// the lease id.
lease_book::lease lease_one(lease_book& b, lease_book::holder who, pool_key k,
                            std::int64_t now = 0) {
  auto a = b.acquire(who, k, now, now);
  EXPECT_EQ(a.asks.size(), 1u);
  auto id = a.asks.at(0).id;
  auto g = b.answered(id, slot_refusal::none, "", now);
  EXPECT_EQ(granted_to(g), std::vector<lease_book::holder>{who});
  return id;
}

TEST(LeaseBookTest, AnAcquireWithNothingIdleQueuesTheHolderAndAsksTheHostOnce) {
  lease_book b;
  auto a = b.acquire(1, pool_a, 50, 1000);
  EXPECT_TRUE(a.grants.empty());
  ASSERT_EQ(a.asks.size(), 1u);
  EXPECT_EQ(a.asks[0].pool, pool_a);
  EXPECT_EQ(a.asks[0].rank, 50);
  EXPECT_TRUE(a.returns.empty());
  EXPECT_TRUE(b.knows(1));
  EXPECT_EQ(b.waiting(), 1u);
  EXPECT_EQ(b.asks_out(), 1u);
  EXPECT_EQ(b.busy(), 0u);

  auto second = b.acquire(2, pool_a, 60, 1001);
  ASSERT_EQ(second.asks.size(), 1u);
  EXPECT_NE(second.asks[0].id, a.asks[0].id);
  EXPECT_EQ(b.waiting(), 2u);
  EXPECT_EQ(b.asks_out(), 2u);
  expect_asks_within_waiters(b);
}

TEST(LeaseBookTest, AGrantedAnswerGoesToTheWaiterWithTheTimeItWaited) {
  lease_book b;
  auto a = b.acquire(1, pool_a, 10, 1000);
  auto g = b.answered(a.asks.at(0).id, slot_refusal::none, "", 1750);
  ASSERT_EQ(g.grants.size(), 1u);
  EXPECT_EQ(g.grants[0].who, 1u);
  EXPECT_EQ(g.grants[0].waited_ns, 750);
  EXPECT_TRUE(g.returns.empty());
  EXPECT_EQ(b.busy(), 1u);
  EXPECT_EQ(b.waiting(), 0u);
  EXPECT_EQ(b.asks_out(), 0u);
  EXPECT_EQ(b.idle(), 0u);
}

TEST(LeaseBookTest, AFreedSlotIsReusedLocallyWithoutAskingTheHost) {
  lease_book b;
  lease_one(b, 1, pool_a);
  auto gone = b.holder_gone(1, 2000);
  EXPECT_TRUE(gone.returns.empty());
  EXPECT_TRUE(gone.grants.empty());
  EXPECT_EQ(b.idle(), 1u);
  EXPECT_FALSE(b.knows(1));

  auto a = b.acquire(2, pool_a, 5, 3000);
  EXPECT_TRUE(a.asks.empty());
  ASSERT_EQ(a.grants.size(), 1u);
  EXPECT_EQ(a.grants[0].who, 2u);
  EXPECT_EQ(a.grants[0].waited_ns, 0);
  EXPECT_EQ(b.idle(), 0u);
  EXPECT_EQ(b.busy(), 1u);
  EXPECT_EQ(b.asks_out(), 0u);
}

TEST(LeaseBookTest, TheMostRecentlyFreedSlotIsReusedFirstAndTheOldestExpires) {
  lease_book b;
  auto first = lease_one(b, 1, pool_a);
  auto second = lease_one(b, 2, pool_a);
  b.holder_gone(1, 100);  // `first` idle since 100
  b.holder_gone(2, 200);  // `second` idle since 200
  b.acquire(3, pool_a, 0, 300);
  b.holder_gone(3, 400);  // the slot reused was `second`: it is idle again since 400
  std::int64_t since = -1;
  ASSERT_TRUE(b.oldest_idle(since));
  EXPECT_EQ(since, 100);
  auto e = b.expire_idle(450, 300);
  EXPECT_EQ(e.returns, std::vector<lease_book::lease>{first});
  EXPECT_EQ(b.idle(), 1u);
  auto rest = b.expire_idle(1000, 300);
  EXPECT_EQ(rest.returns, std::vector<lease_book::lease>{second});
}

TEST(LeaseBookTest, AFreedSlotGoesToTheOldestLocalWaiterAndItsSurplusAskIsWithdrawn) {
  lease_book b;
  auto slot = lease_one(b, 1, pool_a, 0);
  auto w2 = b.acquire(2, pool_a, 100, 100);
  auto w3 = b.acquire(3, pool_a, 200, 200);
  ASSERT_EQ(w2.asks.size(), 1u);
  ASSERT_EQ(w3.asks.size(), 1u);

  auto gone = b.holder_gone(1, 500);
  ASSERT_EQ(gone.grants.size(), 1u);
  EXPECT_EQ(gone.grants[0].who, 2u);
  EXPECT_EQ(gone.grants[0].waited_ns, 400);
  // One waiter left, one ask left: the newest ask is withdrawn, the oldest keeps its place.
  EXPECT_EQ(gone.returns, std::vector<lease_book::lease>{w3.asks[0].id});
  EXPECT_NE(gone.returns[0], slot);
  EXPECT_EQ(gone.work_ended, std::vector<pool_key>{pool_a});
  EXPECT_EQ(b.asks_out(), 1u);
  EXPECT_EQ(b.waiting(), 1u);
  EXPECT_EQ(b.busy(), 1u);
  EXPECT_EQ(b.idle(), 0u);

  // The remaining ask serves holder 3.
  auto g = b.answered(w2.asks[0].id, slot_refusal::none, "", 900);
  EXPECT_EQ(granted_to(g), std::vector<lease_book::holder>{3});
  EXPECT_EQ(g.grants[0].waited_ns, 700);
}

TEST(LeaseBookTest, WaitersAreServedByPriorityThenArrival) {
  lease_book b;
  std::vector<lease_book::lease> asks;
  // (holder, rank): lower rank (an earlier request arrival) goes first.
  for (auto [who, prio] : std::vector<std::pair<lease_book::holder, std::int64_t>>{
           {1, 300}, {2, 100}, {3, 300}, {4, 100}, {5, 200}}) {
    auto a = b.acquire(who, pool_a, prio, 0);
    ASSERT_EQ(a.asks.size(), 1u);
    asks.push_back(a.asks[0].id);
  }
  std::vector<lease_book::holder> order;
  for (auto id : asks) {
    auto g = b.answered(id, slot_refusal::none, "", 10);
    ASSERT_EQ(g.grants.size(), 1u);
    order.push_back(g.grants[0].who);
    expect_asks_within_waiters(b);
  }
  EXPECT_EQ(order, (std::vector<lease_book::holder>{2, 4, 5, 1, 3}));
}

// Asks and waiters pair up in order: the refused ask (rank 20, the later of the two) stands for
// the later waiter, so that waiter is refused and the earlier one keeps its place.
TEST(LeaseBookTest, ARefusalGoesToTheWaiterInTheRefusedAsksPlaceWithTheHostsReason) {
  lease_book b;
  auto a1 = b.acquire(1, pool_a, 20, 0);
  auto a2 = b.acquire(2, pool_a, 10, 0);
  auto other = b.acquire(3, pool_b, 0, 0);
  auto r = b.answered(a1.asks.at(0).id, slot_refusal::no_room, "queue full", 5);
  ASSERT_EQ(r.refusals.size(), 1u);
  EXPECT_EQ(r.refusals[0].who, 1u);
  EXPECT_EQ(r.refusals[0].reason, "queue full");
  EXPECT_EQ(r.refusals[0].why, slot_refusal::no_room);
  EXPECT_TRUE(r.grants.empty());
  EXPECT_TRUE(r.returns.empty());
  EXPECT_FALSE(b.knows(1));
  EXPECT_TRUE(b.knows(2));
  EXPECT_TRUE(b.knows(3));
  EXPECT_EQ(b.waiting(), 2u);
  EXPECT_EQ(b.asks_out(), 2u);

  // The ask left serves holder 2.
  auto g = b.answered(a2.asks.at(0).id, slot_refusal::none, "", 6);
  EXPECT_EQ(granted_to(g), std::vector<lease_book::holder>{2});
  auto g3 = b.answered(other.asks.at(0).id, slot_refusal::none, "", 7);
  EXPECT_EQ(granted_to(g3), std::vector<lease_book::holder>{3});
}

// The host's full queue refuses the newest ask, its wait limit the oldest: in each case the
// waiter of that place is refused, so a full queue never costs an earlier caller its place.
TEST(LeaseBookTest, AFullQueueRefusesTheNewestWaiterAndAWaitLimitTheOldest) {
  lease_book b;
  auto a1 = b.acquire(1, pool_a, 0, 0);
  auto a2 = b.acquire(2, pool_a, 0, 1);
  auto a3 = b.acquire(3, pool_a, 0, 2);
  auto full = b.answered(a3.asks.at(0).id, slot_refusal::no_room, "queue full", 3);
  ASSERT_EQ(full.refusals.size(), 1u);
  EXPECT_EQ(full.refusals[0].who, 3u);
  auto limit = b.answered(a1.asks.at(0).id, slot_refusal::no_room, "waited too long", 4);
  ASSERT_EQ(limit.refusals.size(), 1u);
  EXPECT_EQ(limit.refusals[0].who, 1u);
  EXPECT_EQ(granted_to(b.answered(a2.asks.at(0).id, slot_refusal::none, "", 5)),
            std::vector<lease_book::holder>{2});
}

// A claim its upstream's token cap can never hold is refused as such, not as a full queue: the
// request may go on to another deployment (request_lifecycle).
TEST(LeaseBookTest, TheHostsRefusalKindReachesTheWaiter) {
  lease_book b;
  const lease_book::pool_key heavy{0, -1, 5000};
  auto a = b.acquire(1, heavy, 0, 0);
  auto r = b.answered(a.asks.at(0).id, slot_refusal::too_heavy, "over the token cap", 1);
  ASSERT_EQ(r.refusals.size(), 1u);
  EXPECT_EQ(r.refusals[0].who, 1u);
  EXPECT_EQ(r.refusals[0].why, slot_refusal::too_heavy);
  EXPECT_EQ(r.refusals[0].reason, "over the token cap");
  EXPECT_FALSE(b.knows(1));
}

TEST(LeaseBookTest, AWaiterThatGoesAwayWithdrawsTheNewestAsk) {
  lease_book b;
  auto a1 = b.acquire(1, pool_a, 0, 0);
  auto a2 = b.acquire(2, pool_a, 0, 0);
  auto gone = b.holder_gone(1, 10);
  EXPECT_EQ(gone.returns, std::vector<lease_book::lease>{a2.asks.at(0).id});
  EXPECT_TRUE(gone.work_ended.empty());  // it never worked
  EXPECT_TRUE(gone.grants.empty());
  EXPECT_FALSE(b.knows(1));
  EXPECT_EQ(b.waiting(), 1u);
  EXPECT_EQ(b.asks_out(), 1u);

  auto g = b.answered(a1.asks.at(0).id, slot_refusal::none, "", 20);
  EXPECT_EQ(granted_to(g), std::vector<lease_book::holder>{2});
}

// A retry carries its request's early rank: when an ask is withdrawn, the one with the worst
// place in the host's queue goes, so the oldest waiter keeps the early place.
TEST(LeaseBookTest, TheAskWithdrawnIsTheOneWithTheLatestPriority) {
  lease_book b;
  auto late = b.acquire(1, pool_a, 100, 0);
  auto early = b.acquire(2, pool_a, 5, 0);  // a retry of an older request
  auto gone = b.holder_gone(1, 10);
  EXPECT_EQ(gone.returns, std::vector<lease_book::lease>{late.asks.at(0).id});
  auto g = b.answered(early.asks.at(0).id, slot_refusal::none, "", 20);
  EXPECT_EQ(granted_to(g), std::vector<lease_book::holder>{2});
}

// lease_idle_ms = 0: no slot is kept; one whose work ended goes to a local waiter or back.
TEST(LeaseBookTest, WithoutKeepingIdleSlotsEveryFreedSlotGoesBack) {
  lease_book b{false};
  auto a1 = b.acquire(1, pool_a, 0, 0);
  auto a2 = b.acquire(2, pool_a, 0, 0);
  EXPECT_EQ(granted_to(b.answered(a1.asks.at(0).id, slot_refusal::none, "", 1)),
            std::vector<lease_book::holder>{1});
  auto handed = b.holder_gone(1, 2);  // 2 still waits: it takes the slot
  EXPECT_EQ(granted_to(handed), std::vector<lease_book::holder>{2});
  EXPECT_EQ(handed.returns, std::vector<lease_book::lease>{a2.asks.at(0).id});  // surplus ask
  auto back = b.holder_gone(2, 3);
  EXPECT_EQ(back.returns, std::vector<lease_book::lease>{a1.asks.at(0).id});
  EXPECT_EQ(b.idle(), 0u);
  auto late = b.acquire(3, pool_a, 0, 4);
  EXPECT_EQ(late.asks.size(), 1u);  // nothing kept: asks the host again
}

TEST(LeaseBookTest, AnAnswerForAWithdrawnAskIsIgnored) {
  lease_book b;
  auto a = b.acquire(1, pool_a, 0, 0);
  auto gone = b.holder_gone(1, 10);
  ASSERT_EQ(gone.returns, std::vector<lease_book::lease>{a.asks.at(0).id});
  EXPECT_EQ(b.asks_out(), 0u);

  // The host had granted it before the withdrawal reached it: the return gives it back.
  EXPECT_TRUE(nothing(b.answered(a.asks[0].id, slot_refusal::none, "", 20)));
  EXPECT_TRUE(nothing(b.answered(a.asks[0].id, slot_refusal::no_room, "late", 20)));
  EXPECT_TRUE(nothing(b.answered(12345, slot_refusal::none, "", 20)));
  EXPECT_EQ(b.idle(), 0u);
  EXPECT_EQ(b.busy(), 0u);
}

TEST(LeaseBookTest, AnAnswerIsUsedOnlyOnce) {
  lease_book b;
  auto a1 = b.acquire(1, pool_a, 0, 0);
  b.acquire(2, pool_a, 0, 0);
  auto id = a1.asks.at(0).id;
  EXPECT_EQ(granted_to(b.answered(id, slot_refusal::none, "", 1)),
            std::vector<lease_book::holder>{1});
  EXPECT_TRUE(nothing(b.answered(id, slot_refusal::none, "", 2)));
  EXPECT_EQ(b.busy(), 1u);
  EXPECT_EQ(b.waiting(), 1u);
}

TEST(LeaseBookTest, IdleSlotsAreNotSharedAcrossUpstreamsOrKeys) {
  for (const auto& other : {pool_b, pool_a_keyed}) {
    lease_book b;
    auto id = lease_one(b, 1, pool_a);
    b.holder_gone(1, 10);
    ASSERT_EQ(b.idle(), 1u);

    auto asked = b.acquire(2, other, 0, 20);
    EXPECT_TRUE(asked.grants.empty());
    ASSERT_EQ(asked.asks.size(), 1u);
    EXPECT_EQ(asked.asks[0].pool, other);
    // The idle slot of pool_a cannot serve the waiter, and at the host it may be the very room
    // the waiter's ask needs: it goes back.
    EXPECT_EQ(asked.returns, std::vector<lease_book::lease>{id});
    EXPECT_EQ(b.idle(), 0u);
    EXPECT_EQ(b.waiting(), 1u);
  }
}

TEST(LeaseBookTest, ASlotOfTheSamePoolIsReusedWhileNobodyWaits) {
  lease_book b;
  lease_one(b, 1, pool_a);
  b.holder_gone(1, 10);
  auto same = b.acquire(4, pool_a, 0, 30);
  EXPECT_EQ(granted_to(same), std::vector<lease_book::holder>{4});
  EXPECT_TRUE(same.asks.empty());
  EXPECT_TRUE(same.returns.empty());
  EXPECT_EQ(b.idle(), 0u);
}

TEST(LeaseBookTest, AFreedSlotIsNotHandedToAWaiterOfAnotherPool) {
  lease_book b;
  auto id = lease_one(b, 1, pool_a);
  auto waiting_b = b.acquire(2, pool_b, 0, 5);
  auto gone = b.holder_gone(1, 10);
  EXPECT_TRUE(gone.grants.empty());
  // Nor kept idle while that waiter waits: the host may need its room to serve it.
  EXPECT_EQ(gone.returns, std::vector<lease_book::lease>{id});
  EXPECT_EQ(gone.work_ended, std::vector<pool_key>{pool_a});
  EXPECT_EQ(b.idle(), 0u);
  EXPECT_EQ(b.waiting(), 1u);
  EXPECT_EQ(b.asks_out(), 1u);

  // Once nobody waits, a freed slot is kept again.
  EXPECT_EQ(granted_to(b.answered(waiting_b.asks.at(0).id, slot_refusal::none, "", 11)),
            std::vector<lease_book::holder>{2});
  EXPECT_TRUE(b.holder_gone(2, 12).returns.empty());
  EXPECT_EQ(b.idle(), 1u);
}

// With waiters of two keys here, a freed slot of one key is not handed to that key's waiter: the
// host's queue, fair across keys, decides which goes next.
TEST(LeaseBookTest, AFreedSlotGoesBackWhileWaitersOfAnotherPoolWaitHereToo) {
  lease_book b;
  auto id = lease_one(b, 1, pool_a);
  b.acquire(2, pool_a, 0, 1);
  b.acquire(3, pool_a_keyed, 0, 2);
  auto gone = b.holder_gone(1, 3);
  EXPECT_TRUE(gone.grants.empty());
  EXPECT_EQ(gone.returns, std::vector<lease_book::lease>{id});
  EXPECT_EQ(b.waiting(), 2u);
  EXPECT_EQ(b.asks_out(), 2u);
}

// A recall for one upstream (or key) at its cap gives back that upstream's (key's) idle slots
// and each of its slots whose work ends; the other pools' slots are kept.
TEST(LeaseBookTest, AScopedRecallCoversOnlyItsUpstreamOrKey) {
  for (const auto scope : {recall_scope::upstream, recall_scope::key}) {
    const pool_key covered = scope == recall_scope::upstream ? pool_a : pool_a_keyed;
    const pool_key other = pool_b;
    const std::int64_t index = scope == recall_scope::upstream ? 0 : 7;
    lease_book b;
    auto c1 = lease_one(b, 1, covered);
    lease_one(b, 2, other);
    auto c2 = lease_one(b, 3, covered);
    b.holder_gone(1, 10);
    b.holder_gone(2, 11);
    ASSERT_EQ(b.idle(), 2u);

    auto on = b.recall(true, scope, index);
    EXPECT_EQ(on.returns, std::vector<lease_book::lease>{c1});
    EXPECT_EQ(b.idle(), 1u);  // the other pool's
    EXPECT_EQ(b.holder_gone(3, 12).returns, std::vector<lease_book::lease>{c2});

    EXPECT_TRUE(b.recall(false, scope, index).returns.empty());
    auto again = lease_one(b, 4, covered, 20);
    EXPECT_TRUE(b.holder_gone(4, 21).returns.empty());  // kept again
    EXPECT_NE(again, c1);
    // Only 4's: the other pool's idle slot went back when 4 had to ask the host.
    EXPECT_EQ(b.idle(), 1u);
  }
}

TEST(LeaseBookTest, ATokenWeightedSlotIsNeverKeptIdle) {
  const pool_key weighted{0, -1, 300};
  lease_book b;
  auto id = lease_one(b, 1, weighted);
  auto gone = b.holder_gone(1, 10);
  EXPECT_EQ(gone.returns, std::vector<lease_book::lease>{id});
  EXPECT_EQ(b.idle(), 0u);

  // A waiter of the same weight still takes it straight from the one who ends.
  auto first = lease_one(b, 2, weighted, 20);
  b.acquire(3, weighted, 0, 21);
  auto handed = b.holder_gone(2, 22);
  EXPECT_EQ(granted_to(handed), std::vector<lease_book::holder>{3});
  EXPECT_EQ(handed.returns.size(), 1u);  // 3's own ask, no longer needed
  EXPECT_NE(handed.returns.at(0), first);

  // A grant that finds nobody waiting goes straight back too.
  auto late = b.acquire(4, weighted, 0, 30);
  b.holder_gone(4, 31);  // withdrawn before the answer
  EXPECT_TRUE(nothing(b.answered(late.asks.at(0).id, slot_refusal::none, "", 32)));
}

TEST(LeaseBookTest, ASecondAcquireBySameHolderChangesNothing) {
  lease_book b;
  b.acquire(1, pool_a, 0, 0);
  EXPECT_TRUE(nothing(b.acquire(1, pool_a, 0, 1)));
  EXPECT_TRUE(nothing(b.acquire(1, pool_b, 0, 1)));
  EXPECT_EQ(b.waiting(), 1u);
  EXPECT_EQ(b.asks_out(), 1u);

  b.holder_gone(1, 2);  // withdrawn: nobody waits any more
  lease_one(b, 3, pool_a_keyed);
  lease_one(b, 2, pool_b);
  b.holder_gone(2, 5);
  ASSERT_EQ(b.idle(), 1u);
  // Holder 3 is busy: asking again, even where a slot is idle, takes nothing.
  EXPECT_TRUE(nothing(b.acquire(3, pool_b, 0, 6)));
  EXPECT_EQ(b.idle(), 1u);
  EXPECT_EQ(b.busy(), 1u);
}

TEST(LeaseBookTest, ARecallReturnsEveryIdleSlotAndEveryLaterFreedSlot) {
  lease_book b;
  auto s1 = lease_one(b, 1, pool_a);
  auto s2 = lease_one(b, 2, pool_b);
  auto s3 = lease_one(b, 3, pool_a);
  b.holder_gone(1, 10);
  b.holder_gone(2, 10);
  ASSERT_EQ(b.idle(), 2u);

  auto r = b.recall(true);
  auto returned = r.returns;
  std::sort(returned.begin(), returned.end());
  auto expected = std::vector<lease_book::lease>{s1, s2};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(returned, expected);
  EXPECT_EQ(b.idle(), 0u);
  std::int64_t since = 0;
  EXPECT_FALSE(b.oldest_idle(since));

  // A local waiter keeps its own ask at the host: the freed slot still goes back.
  auto w = b.acquire(4, pool_a, 0, 15);
  ASSERT_EQ(w.asks.size(), 1u);
  auto gone = b.holder_gone(3, 20);
  EXPECT_EQ(gone.returns, std::vector<lease_book::lease>{s3});
  EXPECT_TRUE(gone.grants.empty());
  EXPECT_EQ(gone.work_ended, std::vector<pool_key>{pool_a});
  EXPECT_EQ(b.idle(), 0u);
  EXPECT_EQ(b.waiting(), 1u);
  EXPECT_EQ(b.asks_out(), 1u);
}

TEST(LeaseBookTest, AGrantDuringARecallServesALocalWaiterOrGoesStraightBack) {
  lease_book b;
  auto a1 = b.acquire(1, pool_a, 0, 0);
  auto a2 = b.acquire(2, pool_a, 0, 0);
  b.recall(true);
  // The host granted it by its own order: the local waiter is served even when recalled.
  auto g = b.answered(a1.asks.at(0).id, slot_refusal::none, "", 10);
  EXPECT_EQ(granted_to(g), std::vector<lease_book::holder>{1});
  EXPECT_TRUE(g.returns.empty());

  // Holder 2 stops waiting: its ask is withdrawn; nothing is kept idle.
  auto gone = b.holder_gone(2, 11);
  EXPECT_EQ(gone.returns, std::vector<lease_book::lease>{a2.asks.at(0).id});
  EXPECT_EQ(b.idle(), 0u);
}

TEST(LeaseBookTest, LiftingTheRecallKeepsFreedSlotsAgain) {
  lease_book b;
  lease_one(b, 1, pool_a);
  lease_one(b, 2, pool_a);
  b.recall(true);
  EXPECT_EQ(b.holder_gone(1, 5).returns.size(), 1u);
  EXPECT_TRUE(nothing(b.recall(false)));
  auto gone = b.holder_gone(2, 6);
  EXPECT_TRUE(gone.returns.empty());
  EXPECT_EQ(b.idle(), 1u);
}

TEST(LeaseBookTest, ExpireIdleReturnsOnlySlotsIdleAtLeastThatLong) {
  lease_book b;
  auto s1 = lease_one(b, 1, pool_a);
  auto s2 = lease_one(b, 2, pool_b);
  auto s3 = lease_one(b, 3, pool_a);
  b.holder_gone(1, 100);
  b.holder_gone(2, 200);
  b.holder_gone(3, 300);
  std::int64_t since = 0;
  ASSERT_TRUE(b.oldest_idle(since));
  EXPECT_EQ(since, 100);

  EXPECT_TRUE(b.expire_idle(199, 100).returns.empty());  // s1 idle 99 < 100
  // s1 idle exactly 100: expires; s2 idle 0: stays.
  EXPECT_EQ(b.expire_idle(200, 100).returns, std::vector<lease_book::lease>{s1});
  EXPECT_EQ(b.idle(), 2u);
  ASSERT_TRUE(b.oldest_idle(since));
  EXPECT_EQ(since, 200);

  auto e = b.expire_idle(350, 100);  // s2 idle 150: expires; s3 idle 50: stays
  EXPECT_EQ(e.returns, std::vector<lease_book::lease>{s2});
  EXPECT_EQ(b.idle(), 1u);
  auto last = b.expire_idle(10'000, 100);
  EXPECT_EQ(last.returns, std::vector<lease_book::lease>{s3});
  EXPECT_FALSE(b.oldest_idle(since));
}

TEST(LeaseBookTest, DropAllHandsOverBusyAndWaitingClaimsAndForgetsEverything) {
  lease_book b;
  lease_one(b, 1, pool_a);
  lease_one(b, 2, pool_b);
  b.holder_gone(2, 5);  // idle: goes with the host
  auto w = b.acquire(3, pool_a, 42, 6);
  auto w2 = b.acquire(4, pool_a_keyed, 43, 7);
  b.recall(true);

  auto h = b.drop_all();
  ASSERT_EQ(h.busy.size(), 1u);
  EXPECT_EQ(h.busy[0].who, 1u);
  EXPECT_EQ(h.busy[0].pool, pool_a);
  ASSERT_EQ(h.waiting.size(), 2u);
  std::map<lease_book::holder, lease_book::claim> waiting;
  for (const auto& c : h.waiting) waiting.emplace(c.who, c);
  ASSERT_EQ(waiting.count(3), 1u);
  ASSERT_EQ(waiting.count(4), 1u);
  EXPECT_EQ(waiting.at(3).pool, pool_a);
  EXPECT_EQ(waiting.at(3).rank, 42);
  EXPECT_EQ(waiting.at(4).pool, pool_a_keyed);
  EXPECT_EQ(waiting.at(4).rank, 43);

  EXPECT_EQ(b.busy(), 0u);
  EXPECT_EQ(b.waiting(), 0u);
  EXPECT_EQ(b.idle(), 0u);
  EXPECT_EQ(b.asks_out(), 0u);
  EXPECT_FALSE(b.knows(1));
  EXPECT_FALSE(b.knows(3));
  // Late answers of the old host are ignored; a gone holder is unknown.
  EXPECT_TRUE(nothing(b.answered(w.asks.at(0).id, slot_refusal::none, "", 10)));
  EXPECT_TRUE(nothing(b.answered(w2.asks.at(0).id, slot_refusal::no_room, "x", 10)));
  EXPECT_TRUE(nothing(b.holder_gone(1, 10)));

  // A new host: asks get fresh ids and freed slots are kept (the recall died with the host).
  auto again = b.acquire(5, pool_a, 0, 20);
  ASSERT_EQ(again.asks.size(), 1u);
  EXPECT_GT(again.asks[0].id, w2.asks[0].id);
  b.answered(again.asks[0].id, slot_refusal::none, "", 21);
  EXPECT_TRUE(b.holder_gone(5, 22).returns.empty());
  EXPECT_EQ(b.idle(), 1u);
}

TEST(LeaseBookTest, AnUnknownHolderGoingAwayChangesNothing) {
  lease_book b;
  lease_one(b, 1, pool_a);
  EXPECT_TRUE(nothing(b.holder_gone(99, 0)));
  EXPECT_EQ(b.busy(), 1u);
  b.holder_gone(1, 1);
  EXPECT_TRUE(nothing(b.holder_gone(1, 2)));  // gone twice: the slot is freed once
  EXPECT_EQ(b.idle(), 1u);
}

// A host that grants asks in order, answers asynchronously, and sometimes refuses; the book is
// driven by random acquires, holder ends, recalls and expiries. The host's view of what the
// member holds must always match the book's.
TEST(LeaseBookTest, EveryLeaseIsBusyIdleOrReturnedExactlyOnceUnderRandomTraffic) {
  std::mt19937_64 rng(20240607);
  const std::vector<pool_key> pools{pool_a, pool_b, pool_a_keyed};

  // How often the interesting paths ran, over all rounds: the test must reach each.
  std::size_t withdrawn_count = 0, returned_count = 0, late_answers = 0, refusals = 0,
              local_handovers = 0, drops = 0;

  for (int round = 0; round < 20; ++round) {
    lease_book b;
    // Host side.
    std::deque<lease_book::lease> pending;  // asks queued at the host, in order
    std::set<lease_book::lease> held;       // granted and not given back
    std::set<lease_book::lease> minted;     // every ask id ever seen
    std::set<lease_book::lease> withdrawn;  // given back before being granted
    std::set<lease_book::lease> returned;   // given back after being granted
    std::set<lease_book::lease> refused;    // refused, the refusal maybe still on its way
    struct answer {
      lease_book::lease id;
      bool granted;
    };
    std::deque<answer> in_flight;
    // Member side, as the caller sees it.
    std::map<lease_book::holder, pool_key> waiting_model, busy_model;
    std::map<lease_book::lease, pool_key> asks_model;  // the book's asks not yet answered
    std::set<lease_book::lease> withdrawn_model;
    lease_book::holder next_holder = 1;
    std::int64_t now = 0;

    auto apply = [&](const lease_book::actions& a, const char* what) {
      SCOPED_TRACE(what);
      for (const auto& g : a.grants) {
        ASSERT_EQ(busy_model.count(g.who), 0u) << "granted twice: " << g.who;
        auto w = waiting_model.find(g.who);
        ASSERT_NE(w, waiting_model.end()) << "granted to a holder not waiting: " << g.who;
        EXPECT_GE(g.waited_ns, 0);
        busy_model.emplace(g.who, w->second);
        waiting_model.erase(w);
      }
      for (const auto& r : a.refusals) {
        ASSERT_EQ(waiting_model.erase(r.who), 1u) << "refused a holder not waiting: " << r.who;
      }
      for (const auto& k : a.asks) {
        ASSERT_TRUE(minted.insert(k.id).second) << "ask id reused: " << k.id;
        pending.push_back(k.id);
        asks_model.emplace(k.id, k.pool);
      }
      for (auto id : a.returns) {
        ASSERT_TRUE(minted.count(id)) << "returned an id never asked for: " << id;
        if (auto p = std::find(pending.begin(), pending.end(), id); p != pending.end()) {
          pending.erase(p);
          withdrawn.insert(id);
          ++withdrawn_count;
        } else if (held.erase(id) == 1) {
          returned.insert(id);
          ++returned_count;
        } else if (refused.erase(id) == 1) {
          withdrawn.insert(id);  // crossed the host's refusal: the host ignores it
        } else {
          ADD_FAILURE() << "lease " << id << " returned twice or never granted";
        }
        asks_model.erase(id);  // a withdrawn ask
        withdrawn_model.insert(id);
      }
    };

    auto check = [&](int step) {
      SCOPED_TRACE(testing::Message() << "round " << round << " step " << step);
      // What the host counts as held, less grants the member has not heard of yet.
      std::size_t unheard = 0;
      for (const auto& a : in_flight) unheard += a.granted && held.count(a.id);
      ASSERT_EQ(b.busy() + b.idle(), held.size() - unheard);
      ASSERT_EQ(b.busy(), busy_model.size());
      ASSERT_EQ(b.waiting(), waiting_model.size());
      ASSERT_EQ(b.asks_out(), asks_model.size());
      ASSERT_LE(b.asks_out(), b.waiting());
      for (const auto& k : pools) {
        std::size_t asks = 0, waiters = 0;
        for (const auto& [id, p] : asks_model) asks += p == k;
        for (const auto& [who, p] : waiting_model) waiters += p == k;
        ASSERT_LE(asks, waiters) << "pool (" << k.upstream << ", " << k.key << ")";
      }
      for (const auto& [who, p] : busy_model) ASSERT_TRUE(b.knows(who));
      for (const auto& [who, p] : waiting_model) ASSERT_TRUE(b.knows(who));
    };

    bool recalled = false;
    for (int step = 0; step < 400; ++step) {
      now += static_cast<std::int64_t>(rng() % 50);
      auto dice = rng() % 100;
      if (dice < 30) {
        // A new holder, or (rarely) one already known asking again.
        lease_book::holder who = next_holder++;
        if (rng() % 10 == 0 && !busy_model.empty()) who = busy_model.begin()->first;
        const auto& k = pools[rng() % pools.size()];
        bool known = b.knows(who);
        auto a = b.acquire(who, k, now - static_cast<std::int64_t>(rng() % 100), now);
        if (known) {
          EXPECT_TRUE(nothing(a));
        } else {
          waiting_model.emplace(who, k);
          EXPECT_EQ(a.grants.size() + a.asks.size(), 1u);
        }
        apply(a, "acquire");
      } else if (dice < 50) {
        // The host grants (or, now and then, refuses) its oldest queued ask.
        if (!pending.empty()) {
          auto id = pending.front();
          pending.pop_front();
          bool grant = rng() % 8 != 0;
          (grant ? held : refused).insert(id);
          in_flight.push_back({id, grant});
        }
      } else if (dice < 68) {
        // An answer reaches the member.
        if (!in_flight.empty()) {
          auto ans = in_flight.front();
          in_flight.pop_front();
          bool late = withdrawn_model.count(ans.id) > 0;
          auto a = b.answered(ans.id, ans.granted ? slot_refusal::none : slot_refusal::no_room,
                              "no", now);
          if (late) {
            ++late_answers;
            EXPECT_TRUE(nothing(a)) << "answer for withdrawn ask " << ans.id << " used";
          }
          asks_model.erase(ans.id);
          refusals += a.refusals.size();
          apply(a, "answered");
        }
      } else if (dice < 88) {
        // Some holder ends (busy or waiting), or an unknown one.
        std::vector<lease_book::holder> known;
        for (const auto& [who, p] : busy_model) known.push_back(who);
        for (const auto& [who, p] : waiting_model) known.push_back(who);
        lease_book::holder who = known.empty() ? 999'999 : known[rng() % known.size()];
        bool was_busy = busy_model.count(who) > 0;
        pool_key k = was_busy ? busy_model.at(who) : pool_key{};
        auto a = b.holder_gone(who, now);
        if (was_busy) {
          EXPECT_EQ(a.work_ended, std::vector<pool_key>{k});
        } else {
          EXPECT_TRUE(a.work_ended.empty());
        }
        busy_model.erase(who);
        waiting_model.erase(who);
        local_handovers += a.grants.size();
        apply(a, "holder_gone");
      } else if (dice < 93) {
        recalled = !recalled;
        auto a = b.recall(recalled);
        if (recalled) {
          EXPECT_EQ(b.idle(), 0u);
        }
        apply(a, "recall");
      } else if (dice < 99) {
        apply(b.expire_idle(now, static_cast<std::int64_t>(rng() % 200)), "expire_idle");
      } else {
        // The host is lost: every lease goes with it.
        auto busy_before = b.busy(), waiting_before = b.waiting();
        auto h = b.drop_all();
        EXPECT_EQ(h.busy.size(), busy_before);
        EXPECT_EQ(h.waiting.size(), waiting_before);
        pending.clear();
        held.clear();
        in_flight.clear();
        busy_model.clear();
        waiting_model.clear();
        for (const auto& [id, p] : asks_model) withdrawn_model.insert(id);
        asks_model.clear();
        recalled = false;
        ++drops;
      }
      check(step);
      if (testing::Test::HasFatalFailure()) return;
    }

    // Drain: every holder ends, the host answers everything, the recall returns the rest.
    for (int i = 0; i < 1000 && !(pending.empty() && in_flight.empty() && busy_model.empty() &&
                                  waiting_model.empty());
         ++i) {
      if (!in_flight.empty()) {
        auto ans = in_flight.front();
        in_flight.pop_front();
        auto a =
            b.answered(ans.id, ans.granted ? slot_refusal::none : slot_refusal::no_room, "no", now);
        asks_model.erase(ans.id);
        apply(a, "drain answered");
      } else if (!pending.empty()) {
        auto id = pending.front();
        pending.pop_front();
        held.insert(id);
        in_flight.push_back({id, true});
      } else {
        std::vector<lease_book::holder> known;
        for (const auto& [who, p] : busy_model) known.push_back(who);
        for (const auto& [who, p] : waiting_model) known.push_back(who);
        auto who = known.front();
        auto a = b.holder_gone(who, now);
        busy_model.erase(who);
        waiting_model.erase(who);
        apply(a, "drain holder_gone");
      }
      check(-1);
      if (testing::Test::HasFatalFailure()) return;
    }
    apply(b.recall(true), "final recall");
    EXPECT_TRUE(held.empty()) << "round " << round << ": " << held.size() << " leases kept";
    EXPECT_EQ(b.idle() + b.busy() + b.waiting() + b.asks_out(), 0u);
  }
  EXPECT_GT(withdrawn_count, 0u);
  EXPECT_GT(returned_count, 0u);
  EXPECT_GT(late_answers, 0u);
  EXPECT_GT(refusals, 0u);
  EXPECT_GT(local_handovers, 0u);
  EXPECT_GT(drops, 0u);
}

// A draining member: its queued callers are refused at once (not granted a slot the host hands
// over meanwhile), its asks and idle slots go back to the host, the running work keeps its slot
// until it ends and then returns it, and any later ask is refused.
TEST(LeaseBookTest, StoppingRefusesTheWaitersReturnsWhatIsNotAtWorkAndRefusesLaterAsks) {
  // No slot is idle while someone waits here, so the idle slot is a second book's.
  lease_book quiet;
  lease_one(quiet, 1, pool_a);
  auto idle = lease_one(quiet, 2, pool_b);
  quiet.holder_gone(2, 10);  // kept idle
  ASSERT_EQ(quiet.idle(), 1u);
  auto q = quiet.stop_taking_work("the gateway is shutting down");
  EXPECT_TRUE(q.refusals.empty());
  EXPECT_EQ(q.returns, std::vector<lease_book::lease>{idle});
  EXPECT_EQ(quiet.idle(), 0u);
  EXPECT_EQ(quiet.busy(), 1u);

  lease_book b;
  auto busy = lease_one(b, 1, pool_a);
  auto queued = b.acquire(3, pool_a, 20, 20);
  ASSERT_EQ(queued.asks.size(), 1u);

  auto s = b.stop_taking_work("the gateway is shutting down");
  ASSERT_EQ(s.refusals.size(), 1u);
  EXPECT_EQ(s.refusals[0].who, 3u);
  EXPECT_EQ(s.refusals[0].reason, "the gateway is shutting down");
  EXPECT_EQ(s.refusals[0].why, slot_refusal::stopping);
  EXPECT_EQ(s.returns, std::vector<lease_book::lease>{queued.asks[0].id});
  EXPECT_EQ(b.waiting(), 0u);
  EXPECT_EQ(b.asks_out(), 0u);
  EXPECT_EQ(b.idle(), 0u);
  EXPECT_EQ(b.busy(), 1u);
  // The host's late grant of the withdrawn ask is ignored.
  EXPECT_TRUE(nothing(b.answered(queued.asks[0].id, slot_refusal::none, "", 30)));

  auto later = b.acquire(4, pool_a, 40, 40);
  ASSERT_EQ(later.refusals.size(), 1u);
  EXPECT_EQ(later.refusals[0].who, 4u);
  EXPECT_EQ(later.refusals[0].why, slot_refusal::stopping);
  EXPECT_TRUE(later.asks.empty());
  EXPECT_FALSE(b.knows(4));

  auto ended = b.holder_gone(1, 50);
  EXPECT_EQ(ended.returns, std::vector<lease_book::lease>{busy});
  EXPECT_EQ(b.idle(), 0u);
}

}  // namespace
}  // namespace tether
