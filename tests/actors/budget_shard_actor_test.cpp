// Budget shards under CAF's test coordinator, in front of the real budget actor (or, where the
// test counts what reaches the budget, a stand-in): the cap holds across shards, a freed slot
// serves the next holder of its shard without the budget, and the drain's end stops a shard.
#include "actors/budget_shard_actor.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "actors/budget_actor.hpp"
#include "actors/messages.hpp"
#include "actors/policy/admission/slot_refusal.hpp"
#include "tests/actors/coordinator_fixture.hpp"

namespace tether {
namespace {

using stop_atom = caf::atom_constant<caf::atom("stop_now")>;

// What a stand-in connection actor heard from its shard.
struct answer_log {
  std::optional<bool> granted;
  slot_refusal refusal = slot_refusal::none;
  std::string reason;
  bool ended = false;  // told to stop and gone: its upstream no longer sees its work
};

// A connection actor's stand-in: asks `shard` for a slot at once, notes the answer, and exits
// (which is what frees a slot) when told.
caf::behavior fake_connection(caf::event_based_actor* self, caf::actor shard,
                              std::uint64_t upstream, std::uint64_t tokens,
                              std::shared_ptr<answer_log> log) {
  self->send(shard, acquire_atom::value, upstream, std::int64_t{-1}, std::int64_t{0}, tokens);
  return {[log](grant_atom, std::int32_t refusal, const std::string& reason) {
            log->refusal = static_cast<slot_refusal>(refusal);
            log->granted = log->refusal == slot_refusal::none;
            log->reason = reason;
          },
          [self, log](stop_atom) {
            log->ended = true;
            self->quit();
          }};
}

// What reached the budget's stand-in.
struct budget_log {
  int asks = 0;
  int returns = 0;
};

// A budget with room for every lease: it grants each at once and counts the traffic.
caf::behavior counting_budget(caf::event_based_actor* self, std::shared_ptr<budget_log> log) {
  return {[self, log](lease_atom, std::uint64_t, std::int64_t, std::int64_t, std::uint64_t,
                      std::uint64_t lease) {
            ++log->asks;
            self->send(caf::actor_cast<caf::actor>(self->current_sender()), lease_grant_atom::value,
                       lease, static_cast<std::int32_t>(slot_refusal::none), std::string{});
          },
          [log](lease_return_atom, std::uint64_t) { ++log->returns; },
          [self](stop_atom) { self->quit(); }};
}

// The metrics the budget and its shards update: destroyed after every actor that updates them.
struct shard_stats {
  metrics stats_{{"u0", "u1"}};
};

class BudgetShardTest : protected shard_stats, public coordinator_fixture {
 protected:
  ~BudgetShardTest() override {
    for (auto& h : holders_) caf::anon_send(h.actor, stop_atom::value);
    if (counting_) caf::anon_send(counting_, stop_atom::value);
    if (budget_) caf::anon_send_exit(budget_, caf::exit_reason::user_shutdown);
    run();  // a shard ends with its budget
  }

  // The real budget with a global cap of `global` (no queue timeout) and `shards` shards.
  void real_budget(std::uint32_t global, std::size_t shards) {
    budget_limits l;
    l.global = global;
    l.per_upstream = {global, global};
    budget_ = system_.spawn(budget_actor, l, &stats_, nullptr);
    for (std::size_t i = 0; i < shards; ++i)
      shards_.push_back(system_.spawn(budget_shard_actor, budget_, &stats_));
    run();
  }

  void counting_budget_with_one_shard() {
    counting_ = system_.spawn(counting_budget, traffic_);
    shards_.push_back(system_.spawn(budget_shard_actor, counting_, &stats_));
    run();
  }

  struct holder {
    caf::actor actor;
    std::shared_ptr<answer_log> log;
    bool stopped = false;
  };

  // A connection actor of shard `s` asks; returns its index in holders_.
  std::size_t ask(std::size_t s, std::uint64_t tokens = 0, std::uint64_t upstream = 0) {
    auto log = std::make_shared<answer_log>();
    holders_.push_back({system_.spawn(fake_connection, shards_.at(s), upstream, tokens, log), log});
    run();
    return holders_.size() - 1;
  }

  void stop(std::size_t h) {
    caf::anon_send(holders_.at(h).actor, stop_atom::value);
    holders_.at(h).stopped = true;
    run();
  }

  std::optional<bool> granted(std::size_t h) const { return holders_.at(h).log->granted; }

  // Granted and not yet ended: the work the upstream sees.
  int at_work() const {
    int n = 0;
    for (const auto& h : holders_) n += (h.log->granted == true && !h.stopped) ? 1 : 0;
    return n;
  }

  // What `who` answers to (slots_atom), asked by a probe actor.
  std::uint64_t slots_of(const caf::actor& who) {
    auto answer = std::make_shared<std::uint64_t>(~std::uint64_t{0});
    system_.spawn(
        [](caf::event_based_actor* self, std::shared_ptr<std::uint64_t> out, caf::actor target) {
          self->request(target, caf::infinite, slots_atom::value)
              .then([out](std::uint64_t n) { *out = n; }, [](caf::error&) {});
        },
        answer, who);
    run();
    return *answer;
  }

  caf::actor budget_;
  caf::actor counting_;
  std::shared_ptr<budget_log> traffic_ = std::make_shared<budget_log>();
  std::vector<caf::actor> shards_;
  std::vector<holder> holders_;
};

TEST_F(BudgetShardTest, AFreedSlotServesTheNextHolderOfItsShardWithoutAskingTheBudget) {
  counting_budget_with_one_shard();
  auto first = ask(0);
  EXPECT_EQ(granted(first), true);
  EXPECT_EQ(traffic_->asks, 1);
  EXPECT_EQ(stats_.upstream_work(0), 1);
  stop(first);
  EXPECT_EQ(stats_.upstream_work(0), 0);
  EXPECT_EQ(traffic_->returns, 0);  // kept: nobody waits elsewhere

  auto second = ask(0);
  EXPECT_EQ(granted(second), true);
  EXPECT_EQ(traffic_->asks, 1);  // the budget heard nothing of it
  EXPECT_EQ(stats_.upstream_work(0), 1);
}

TEST_F(BudgetShardTest, ATokenWeightedSlotGoesBackWhenItsWorkEnds) {
  counting_budget_with_one_shard();
  auto h = ask(0, 300);
  EXPECT_EQ(granted(h), true);
  stop(h);
  EXPECT_EQ(traffic_->returns, 1);
}

TEST_F(BudgetShardTest, TheCapHoldsAcrossShardsAndAFreedSlotGoesToTheOtherShardsWaiter) {
  real_budget(2, 2);
  auto a1 = ask(0);
  auto a2 = ask(0);
  auto b1 = ask(1);
  EXPECT_EQ(granted(a1), true);
  EXPECT_EQ(granted(a2), true);
  EXPECT_EQ(granted(b1), std::nullopt);  // queued at the budget behind the cap
  EXPECT_EQ(stats_.queue_depth(), 1);

  stop(a1);  // shard 0 is recalled: the slot goes back and the budget grants shard 1
  EXPECT_EQ(granted(b1), true);
  EXPECT_EQ(at_work(), 2);
  EXPECT_EQ(stats_.queue_depth(), 0);
  EXPECT_EQ(stats_.upstream_work(0), 2);

  stop(a2);  // at the cap: shard 0 gives the slot back rather than keep it idle
  EXPECT_EQ(slots_of(budget_), 1u);
  auto b2 = ask(1);
  EXPECT_EQ(granted(b2), true);
  EXPECT_EQ(at_work(), 2);
  EXPECT_EQ(slots_of(budget_), 2u);
  EXPECT_EQ(slots_of(shards_[0]), 0u);
  EXPECT_EQ(slots_of(shards_[1]), 2u);
}

// Below the cap a shard keeps its freed slot; when another shard's holder then finds the cap
// reached (here with no queue to wait in), that slot is already back: nothing idle blocks it.
TEST_F(BudgetShardTest, NoSlotSitsIdleInOneShardWhileAnotherShardsHolderIsRefused) {
  budget_limits l;
  l.global = 2;
  l.per_upstream = {2, 2};
  l.queue_max = 0;
  budget_ = system_.spawn(budget_actor, l, &stats_, nullptr);
  for (int i = 0; i < 2; ++i)
    shards_.push_back(system_.spawn(budget_shard_actor, budget_, &stats_));
  run();
  auto a1 = ask(0);
  EXPECT_EQ(granted(a1), true);
  stop(a1);  // below the cap: kept
  EXPECT_EQ(slots_of(budget_), 1u);
  auto a2 = ask(0);
  auto b1 = ask(1);  // the cap is reached: shard 0 is recalled
  EXPECT_EQ(granted(a2), true);
  EXPECT_EQ(granted(b1), true);
  stop(a2);  // at the cap: it goes back
  auto b2 = ask(1);
  EXPECT_EQ(granted(b2), true);
  auto b3 = ask(1);  // the cap is reached by work: refused at once, no queue to wait in
  EXPECT_EQ(granted(b3), false);
  EXPECT_EQ(holders_[b3].log->refusal, slot_refusal::no_room);
}

// A claim over its upstream's whole token cap comes back through the lease as what it is, not as
// a full queue: the request may go on to an upstream whose cap can hold it.
TEST_F(BudgetShardTest, ARefusalForATokenCapTooSmallKeepsItsKindThroughTheShard) {
  budget_limits l;
  l.global = 4;
  l.per_upstream = {4, 4};
  l.tokens_per_upstream = {1000, 0};
  budget_ = system_.spawn(budget_actor, l, &stats_, nullptr);
  shards_.push_back(system_.spawn(budget_shard_actor, budget_, &stats_));
  run();
  auto heavy = ask(0, 1500);
  EXPECT_EQ(granted(heavy), false);
  EXPECT_EQ(holders_[heavy].log->refusal, slot_refusal::too_heavy);
  EXPECT_NE(holders_[heavy].log->reason.find("max_tokens_in_flight (1000)"), std::string::npos);
  auto fits = ask(0, 1000);
  EXPECT_EQ(granted(fits), true);
  auto elsewhere = ask(0, 1500, 1);
  EXPECT_EQ(granted(elsewhere), true);
}

// Holders come and go on three shards in a random order: the work never exceeds the cap, every
// holder is granted in the end, and what the budget counts afterwards is only idle leases.
TEST_F(BudgetShardTest, TheWorkNeverExceedsTheCapUnderRandomTraffic) {
  constexpr int cap = 3;
  real_budget(cap, 3);
  std::mt19937 rng(20261206);
  int peak = 0;
  for (int step = 0; step < 400; ++step) {
    std::vector<std::size_t> running;
    for (std::size_t i = 0; i < holders_.size(); ++i) {
      if (granted(i) == true && !holders_[i].stopped) running.push_back(i);
    }
    if (!running.empty() && rng() % 2 == 0) {
      stop(running[rng() % running.size()]);
    } else {
      ask(rng() % shards_.size());
    }
    peak = std::max(peak, at_work());
    ASSERT_LE(at_work(), cap) << "step " << step;
  }
  EXPECT_EQ(peak, cap);
  // Everyone still waiting gets a slot as the work ends.
  for (int rounds = 0; rounds < 1000; ++rounds) {
    bool stopped_any = false;
    for (std::size_t i = 0; i < holders_.size(); ++i) {
      if (granted(i) == true && !holders_[i].stopped) {
        stop(i);
        stopped_any = true;
      }
    }
    if (!stopped_any) break;
  }
  for (std::size_t i = 0; i < holders_.size(); ++i) EXPECT_EQ(granted(i), true) << i;
  EXPECT_EQ(at_work(), 0);
  EXPECT_EQ(stats_.upstream_work(0), 0);
  EXPECT_EQ(stats_.queue_depth(), 0);
  EXPECT_LE(slots_of(budget_), static_cast<std::uint64_t>(cap));
}

// One upstream at its cap recalls the shards' slots of that upstream only: the other upstream's
// freed slots stay with their shard, so its requests still do without the budget.
TEST_F(BudgetShardTest, AnUpstreamAtItsCapRecallsOnlyThatUpstreamsSlots) {
  budget_limits l;
  l.global = 8;
  l.per_upstream = {1, 8};
  budget_ = system_.spawn(budget_actor, l, &stats_, nullptr);
  shards_.push_back(system_.spawn(budget_shard_actor, budget_, &stats_));
  run();
  auto small = ask(0, 0, 0);  // upstream 0 is now at its cap of 1
  auto big = ask(0, 0, 1);
  EXPECT_EQ(granted(small), true);
  EXPECT_EQ(granted(big), true);
  stop(big);
  EXPECT_EQ(slots_of(budget_), 2u);  // upstream 1's slot is kept, idle
  auto big_again = ask(0, 0, 1);
  EXPECT_EQ(granted(big_again), true);
  EXPECT_EQ(slots_of(budget_), 2u);  // and reused
  stop(small);
  EXPECT_EQ(slots_of(budget_), 1u);  // upstream 0's goes back
}

// Asks, ends, leases, returns and recalls interleave one message at a time, in a random order,
// across three shards and two upstreams with caps of their own under a smaller global one: at no
// message does the work an upstream sees exceed its cap, nor all of it the global cap.
TEST_F(BudgetShardTest, EveryCapHoldsAtEveryMessageUnderInterleavedTraffic) {
  const std::vector<int> upstream_cap{2, 3};
  constexpr int global_cap = 4;
  budget_limits l;
  l.global = global_cap;
  l.per_upstream = {2, 3};
  l.queue_max = 100000;  // asks may outrun ends for a while: nobody is turned away
  budget_ = system_.spawn(budget_actor, l, &stats_, nullptr);
  for (int i = 0; i < 3; ++i)
    shards_.push_back(system_.spawn(budget_shard_actor, budget_, &stats_));
  run();

  std::vector<std::uint64_t> upstream_of;
  auto working = [&](std::optional<std::uint64_t> upstream) {
    int n = 0;
    for (std::size_t i = 0; i < holders_.size(); ++i) {
      const auto& log = *holders_[i].log;
      if (log.granted == true && !log.ended && (!upstream || upstream_of[i] == *upstream)) ++n;
    }
    return n;
  };
  std::vector<int> peak(2, 0);
  std::mt19937 rng(20261206);
  for (int step = 0; step < 3000; ++step) {
    std::vector<std::size_t> running;
    std::size_t waiting = 0;
    for (std::size_t i = 0; i < holders_.size(); ++i) {
      if (holders_[i].log->granted == true && !holders_[i].stopped) running.push_back(i);
      if (!holders_[i].log->granted) ++waiting;
    }
    // Phases in which work ends faster, as fast, or slower than it comes: the caps are reached
    // and left again, with slots idle in some shards while others' holders wait.
    const auto stop_in_4 = 1u + static_cast<unsigned>(step / 50) % 3u;
    if (!running.empty() && (waiting >= 6 || rng() % 4 < stop_in_4)) {
      auto h = running[rng() % running.size()];
      caf::anon_send(holders_[h].actor, stop_atom::value);
      holders_[h].stopped = true;
    } else {
      auto log = std::make_shared<answer_log>();
      const std::uint64_t upstream = rng() % 2;
      upstream_of.push_back(upstream);
      holders_.push_back(
          {system_.spawn(fake_connection, shards_[rng() % shards_.size()], upstream, 0, log), log});
    }
    for (auto n = rng() % 12; n > 0 && sched_.has_job(); --n) {
      // Any actor with mail may go next, not only the first scheduled.
      auto next = sched_.jobs.begin() + static_cast<std::ptrdiff_t>(rng() % sched_.jobs.size());
      std::rotate(sched_.jobs.begin(), next, next + 1);
      sched_.run_once();
      for (std::uint64_t u = 0; u < 2; ++u) {
        ASSERT_LE(working(u), upstream_cap[u]) << "step " << step << ", upstream " << u;
        peak[u] = std::max(peak[u], working(u));
      }
      ASSERT_LE(working(std::nullopt), global_cap) << "step " << step;
    }
  }
  EXPECT_EQ(peak, upstream_cap);
  // Everyone still waiting gets a slot as the work ends, and nothing is left.
  for (int rounds = 0; rounds < 10000; ++rounds) {
    run();
    bool stopped_any = false;
    for (auto& h : holders_) {
      if (h.log->granted == true && !h.stopped) {
        caf::anon_send(h.actor, stop_atom::value);
        h.stopped = true;
        stopped_any = true;
      }
    }
    if (!stopped_any) break;
  }
  run();
  for (std::size_t i = 0; i < holders_.size(); ++i)
    EXPECT_EQ(granted(i), true) << i << ": " << holders_[i].log->reason;
  EXPECT_EQ(stats_.upstream_work(0), 0);
  EXPECT_EQ(stats_.upstream_work(1), 0);
  EXPECT_EQ(stats_.queue_depth(), 0);
  for (const auto& s : shards_) caf::anon_send(s, drain_now_atom::value);
  run();
  EXPECT_EQ(slots_of(budget_), 0u);
}

TEST_F(BudgetShardTest, TheDrainsEndRefusesTheWaitersAndLaterAsksAndReturnsWhatEnds) {
  real_budget(1, 2);
  auto h1 = ask(0);
  auto h2 = ask(0);
  EXPECT_EQ(granted(h1), true);
  EXPECT_EQ(granted(h2), std::nullopt);

  caf::anon_send(shards_[0], drain_now_atom::value);
  run();
  EXPECT_EQ(granted(h2), false);
  EXPECT_EQ(holders_[h2].log->reason, "the gateway is shutting down");
  EXPECT_EQ(holders_[h2].log->refusal, slot_refusal::stopping);
  auto h3 = ask(0);
  EXPECT_EQ(granted(h3), false);
  EXPECT_EQ(stats_.queue_depth(), 0);

  EXPECT_EQ(slots_of(shards_[0]), 1u);  // h1's work runs on
  stop(h1);
  EXPECT_EQ(slots_of(shards_[0]), 0u);
  EXPECT_EQ(slots_of(budget_), 0u);  // given back, not kept idle

  auto other = ask(1);  // the other shard was not told: it still serves
  EXPECT_EQ(granted(other), true);
}

}  // namespace
}  // namespace tether
