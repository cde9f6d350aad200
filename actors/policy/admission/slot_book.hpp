// The budget's count of slots (issue #26): who holds one, who waits for one in the admission
// queue, and whether a claim fits under the global, per-upstream and per-key caps. The budget
// actor feeds it what its actors ask and carries out what it answers.
//
// The queue is fair across keys: each key (and "no key") waits in a lane of its own, and freed
// capacity goes round the lanes in proportion to each key's weight (stride scheduling: the lane
// with the least pass goes next, a grant adds 1/weight to its pass), so a key that queues more
// waits longer itself instead of making every other key wait. Within a lane the smallest ticket
// goes first: its rank (actors/policy/admission/queue_priority.hpp: class, then arrival), then the
// order of asking.
//
// Pure bookkeeping: events in, actions out. Owners are opaque ids the actor maps to its actors:
// a connection actor holds or awaits one slot as itself (lease 0); a cluster member's link actor
// holds and awaits any number, one per lease id it chose. Time comes in as `now_ns`; the wait
// limit of the queue is the actor's timer, which names its waiter by the ticket it was given.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "actors/policy/admission/recall_scope.hpp"
#include "actors/policy/admission/slot_refusal.hpp"

namespace tether {

class slot_book {
 public:
  using owner = std::uint64_t;
  using lease_id = std::uint64_t;  // 0: the owner's own slot; otherwise one of a link's leases
  // A waiter's place in its key's lane: (rank, then the order of asking). The rank orders by
  // the request's class and arrival, so a retry of an older request is not sent behind newer
  // ones.
  using ticket = std::pair<std::int64_t, std::uint64_t>;

  struct caps {
    std::uint32_t global = 0;
    std::vector<std::uint32_t> per_upstream;  // an upstream beyond the list counts as upstream 0
    std::vector<std::uint32_t> per_key;       // 0 = no cap; a key beyond the list has none
    std::uint32_t queue_max = 0;
    // Each upstream's max_tokens_in_flight, 0 = no cap; an upstream beyond the list has none.
    std::vector<std::uint64_t> tokens_per_upstream;
    // Each key's share of the queue when keys compete (0 counts as 1); a key beyond the list,
    // and "no key", have 1.
    std::vector<std::uint32_t> weight_per_key;
  };
  // A slot, and the token weight held with it (0 where the upstream has no token cap).
  struct claim {
    std::size_t upstream = 0;
    std::int64_t key = -1;  // -1 = none
    std::uint64_t tokens = 0;
    bool operator==(const claim&) const = default;
  };
  struct holder {
    owner who = 0;
    lease_id id = 0;
    auto operator<=>(const holder&) const = default;
  };
  // `local`: a connection actor of this node, which this node's work and queue gauges count
  // (leases and other nodes' actors are counted by the nodes that run that work).
  struct grant {
    holder who;
    claim what;
    bool local = false;
    std::int64_t waited_ns = 0;
  };
  struct refusal {
    holder who;
    std::string reason;
    slot_refusal why = slot_refusal::no_room;
  };
  struct freed_slot {
    claim what;
    bool local = false;
  };
  // On or off, for every slot the link holds or only for one upstream's or one key's
  // (`index`; -1 with recall_scope::all).
  struct recall {
    owner link;
    bool on;
    recall_scope scope = recall_scope::all;
    std::int64_t index = -1;
  };
  // What the caller must do: update the gauges for the slots released and granted, answer the
  // grants and refusals, then tell each link whether it is recalled. `queued`: the asker waits
  // under that ticket (the caller starts its wait limit). `queue_changed`: the queue may have
  // changed, so its depth is published again — before any grant goes out, so a reader never sees
  // a granted waiter still queued.
  struct actions {
    std::vector<freed_slot> released;
    std::vector<grant> grants;
    std::vector<refusal> refusals;
    std::vector<recall> recalls;
    std::optional<ticket> queued;
    bool queue_changed = false;
  };

  explicit slot_book(caps limits);

  // A connection actor asks for its slot: granted at once when it fits, else queued, else (queue
  // full) refused. A second ask from a holder already known changes nothing: a cluster member
  // may ask again for a connection actor that holds or awaits a slot here (after an outage).
  // A claim heavier than its upstream's whole token cap is refused at once: it could never fit.
  actions acquire(owner who, std::uint64_t upstream, std::int64_t key, std::int64_t rank,
                  std::uint64_t tokens, bool local, std::int64_t now_ns);
  // A member's link asks for one slot under lease `id` (not 0), answered the same way.
  actions lease(owner link, lease_id id, std::uint64_t upstream, std::int64_t key,
                std::int64_t rank, std::uint64_t tokens, std::int64_t now_ns);
  // The holder gives its slot back (the next waiters that fit take it, lane by lane), or
  // withdraws its ask
  // (nobody there waits any more); unknown: nothing.
  actions give_back(holder h, std::int64_t now_ns);
  // The waiter with that ticket waited too long and is refused; one no longer queued: nothing.
  actions timed_out(ticket t);
  // The owner ended (a connection actor exited, a member died or its connection broke): all it
  // held is freed and all it awaited leaves the queue unanswered.
  actions owner_gone(owner who, std::int64_t now_ns);

  // This node stops (the drain's end): its waiters are refused now and its later asks at once,
  // so that a slot a stopping request frees cannot start upstream work for another whose stop
  // is still on its way. Leases (other members' work) are served as before.
  actions refuse_local(std::string reason);

  // A reload: the new caps apply from now on. A slot held stays held, even past a lowered cap
  // (its work runs on; none is taken until the count is under the cap again); raised caps admit
  // waiters now; a waiter heavier than its upstream's new token cap is refused. Upstreams and keys
  // only grow in number (a removed one keeps its index).
  actions set_caps(caps limits, std::int64_t now_ns);

  bool fits(const claim& c) const;
  bool knows(holder h) const { return holders_.count(h) > 0 || queued_by_.count(h) > 0; }
  bool is_lessee(owner who) const { return lessees_.count(who) > 0; }
  std::optional<claim> held_by(holder h) const;
  std::uint32_t held() const { return held_; }
  std::uint32_t held_on_upstream(std::size_t upstream) const;
  std::uint32_t held_on_key(std::int64_t key) const;
  std::uint64_t tokens_on_upstream(std::size_t upstream) const;
  std::size_t waiting() const { return queue_.size(); }
  std::size_t waiting_local() const { return waiting_local_; }
  std::size_t waiting_for_key(std::int64_t key) const;

 private:
  struct waiter {
    holder who;
    claim what;
    bool local;
    std::int64_t since_ns;
  };
  struct held_slot {
    claim what;
    bool local;
  };
  // A member's link holding leases: recalled (asked for its idle slots back) while anyone else
  // waits here.
  // A key's lane: its waiters in order, and its place in the round (the least pass goes next;
  // between equals, the lane that has waited since the earlier ask).
  struct lane {
    std::set<ticket> waiting;
    std::uint64_t pass = 0;
    std::uint64_t joined = 0;  // the order of the ask that made it non-empty
  };
  struct lessee {
    std::uint32_t slots = 0;
    std::uint32_t queued = 0;
    bool recalled = false;                     // all its slots
    std::set<std::size_t> upstreams_recalled;  // its slots of these upstreams
    std::set<std::int64_t> keys_recalled;      // its slots of these keys
  };

  claim claim_for(std::uint64_t upstream, std::int64_t key, std::uint64_t tokens) const;
  std::uint64_t token_cap(std::size_t upstream) const;
  bool tokens_fit(const claim& c) const;
  std::optional<std::string> never_fits(const claim& c) const;
  actions admit(holder h, claim c, std::int64_t rank, bool local, std::int64_t now_ns);
  void take(holder h, const claim& c, bool local);
  void release(std::map<holder, held_slot>::iterator it, actions& out);
  waiter dequeue(std::map<ticket, waiter>::iterator it);
  void enqueue(holder h, const claim& c, ticket t, bool local, std::int64_t now_ns);
  void drain(std::int64_t now_ns, actions& out);
  std::optional<ticket> next_to_serve() const;
  std::uint64_t stride_of(std::int64_t key) const;
  void update_recalls(actions& out);
  bool upstream_full(std::size_t upstream) const;
  bool key_full(std::int64_t key) const;
  void touched(const claim& c);
  lessee* lessee_of(const holder& h);

  caps caps_;
  std::uint32_t held_ = 0;
  std::vector<std::uint32_t> held_upstream_;
  std::vector<std::uint32_t> held_key_;
  std::vector<std::uint64_t> held_tokens_;      // per upstream, as held_upstream_
  std::vector<std::uint32_t> queued_upstream_;  // waiters per upstream
  std::map<holder, held_slot> holders_;
  std::map<ticket, waiter> queue_;
  std::map<holder, ticket> queued_by_;
  std::map<std::int64_t, lane> lanes_;  // by key, -1 = no key; kept when empty (its pass counts)
  std::uint64_t round_pass_ = 0;        // the pass of the last lane served: where a newcomer starts
  std::map<owner, lessee> lessees_;
  std::uint64_t next_seq_ = 0;
  std::size_t waiting_local_ = 0;
  std::optional<std::string> refusing_local_;  // set by refuse_local: why
  // The upstreams and keys whose slot count changed since the recalls were last brought up to
  // date: only their caps can have been reached or left (a reload's set_caps marks them all).
  std::set<std::size_t> touched_upstreams_;
  std::set<std::int64_t> touched_keys_;
};

}  // namespace tether
