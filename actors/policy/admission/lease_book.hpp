// The slots leased from a budget actor by one who serves many connection actors: a cluster
// member's link (issue #7) or an io thread's budget shard (issue #27).
//
// Asking the budget costs a message each way to an actor every thread shares (for a member, a
// loopback round trip through two middleman threads), so the lessee keeps the slots it was granted
// as leases: a slot whose work ended stays with it for a while and the next local request takes it
// without asking anyone. The budget still counts every leased slot against the cap, so the
// upstream never sees more than the cap; it monitors the lessee, so a dead lessee's leases are
// freed by its down_msg. Fairness: while someone else waits at the budget, it recalls; a recalled
// lessee gives back its idle slots at once and every slot whose work ends, so the budget's queue
// decides who goes next. For the same reason no slot stays idle while a waiter of this book waits
// for another pool's, and a token-weighted slot is never kept idle.
//
// Pure bookkeeping: events in, actions out. Holders are opaque ids (the lessee maps them to its
// connection actors); leases are ids this book mints.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "actors/policy/admission/recall_scope.hpp"
#include "actors/policy/admission/slot_refusal.hpp"

namespace tether {

class lease_book {
 public:
  // keep_idle = false: a slot whose work ended and that no local waiter takes goes straight back.
  explicit lease_book(bool keep_idle = true) : keep_idle_(keep_idle) {}

  using holder = std::uint64_t;
  using lease = std::uint64_t;
  // Slots are interchangeable only within the same caps: the same upstream, key (-1 = none) and
  // token weight (0 where the upstream has no token cap).
  struct pool_key {
    std::uint64_t upstream = 0;
    std::int64_t key = -1;
    std::uint64_t tokens = 0;
    auto operator<=>(const pool_key&) const = default;
  };

  struct ask {
    lease id;
    pool_key pool;
    std::int64_t rank;
  };
  struct grant {
    holder who;
    std::int64_t waited_ns;
    pool_key pool{};
  };
  struct refusal {
    holder who;
    std::string reason;
    slot_refusal why = slot_refusal::no_room;
  };
  // What the caller must do, in this order: grants and refusals to local holders, new asks and
  // returns (give back a held lease, or withdraw a queued ask) to the host.
  struct actions {
    std::vector<grant> grants;
    std::vector<refusal> refusals;
    std::vector<ask> asks;
    std::vector<lease> returns;
    std::vector<pool_key> work_ended;  // a busy slot's holder went away (for the work gauge)
  };
  struct claim {
    holder who;
    pool_key pool;
    std::int64_t rank;
  };
  // What was in flight when the host was lost: the caller asks its own budget for each.
  struct handover {
    std::vector<claim> busy;
    std::vector<claim> waiting;
  };

  // A holder asks for a slot; a second ask from a holder already known changes nothing.
  actions acquire(holder who, pool_key pool, std::int64_t rank, std::int64_t now_ns);
  // The host answered one of this book's asks: granted (none) or why not, which the refused
  // holder is told as it is (an unknown id was withdrawn: the host has already dropped it, so it
  // is ignored).
  actions answered(lease id, slot_refusal why, const std::string& reason, std::int64_t now_ns);
  // A holder ended: its busy slot is free (kept, handed on, or given back), or it stops waiting.
  actions holder_gone(holder who, std::int64_t now_ns);
  // The host wants slots back, or no longer does: every slot (another node waits, or the global
  // cap is reached), or those of one upstream or key (its cap is reached; `index` names it).
  actions recall(bool on, recall_scope scope = recall_scope::all, std::int64_t index = -1);
  // Gives back the slots idle for at least `idle_ns`.
  actions expire_idle(std::int64_t now_ns, std::int64_t idle_ns);
  // The host is gone and every lease with it.
  handover drop_all();
  // The node drains: every waiter is refused with `reason` and so is every later ask; queued asks
  // are withdrawn and idle slots given back, and a slot whose work ends goes straight back.
  actions stop_taking_work(const std::string& reason);

  bool knows(holder who) const { return busy_.count(who) > 0 || waiting_by_.count(who) > 0; }
  std::size_t busy() const { return busy_.size(); }
  std::size_t waiting() const { return waiting_by_.size(); }
  std::size_t idle() const;
  std::size_t asks_out() const { return ask_pool_.size(); }
  // When the oldest idle slot was freed (nothing idle: none).
  bool oldest_idle(std::int64_t& since_ns) const;

 private:
  using queue_key = std::pair<std::int64_t, std::uint64_t>;  // (rank, arrival)
  struct idle_slot {
    lease id;
    std::int64_t since_ns;
  };
  struct waiter {
    holder who;
    std::int64_t since_ns;
  };
  struct pool {
    std::vector<idle_slot> idle;  // most recently freed last: reused first, the oldest expire
    std::map<queue_key, waiter> waiting;
    std::set<std::pair<std::int64_t, lease>> asks;  // (rank, id): the worst is withdrawn
  };
  struct busy_slot {
    pool_key pool;
    lease id;
    std::int64_t rank;
  };

  void hand_over(pool& p, const pool_key& k, lease id, std::int64_t now_ns, actions& out);
  void free_slot(pool& p, const pool_key& k, lease id, std::int64_t now_ns, actions& out);
  void trim_asks(pool& p, actions& out);
  bool keeps_idle(const pool_key& k) const;
  bool recalled(const pool_key& k) const;
  void give_back_idle(actions& out);

  std::map<pool_key, pool> pools_;
  std::unordered_map<holder, busy_slot> busy_;
  std::unordered_map<holder, std::pair<pool_key, queue_key>> waiting_by_;
  std::unordered_map<lease, std::pair<pool_key, std::int64_t>> ask_pool_;  // → (pool, rank)
  lease next_lease_ = 1;
  std::uint64_t next_seq_ = 0;
  bool recalled_ = false;  // every slot
  std::set<std::uint64_t> recalled_upstreams_;
  std::set<std::int64_t> recalled_keys_;
  bool keep_idle_ = true;
  bool stopped_ = false;
  std::string stop_reason_;
};

}  // namespace tether
