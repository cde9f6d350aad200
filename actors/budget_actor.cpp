#include "actors/budget_actor.hpp"

#include <map>
#include <set>

#include "actors/messages.hpp"

namespace tether {

budget_limits budget_limits_from(const config::gateway_config& cfg) {
  budget_limits l;
  l.global = cfg.budget.max_in_flight;
  for (const auto& u : cfg.upstreams) l.per_upstream.push_back(u.max_in_flight);
  for (const auto& k : cfg.keys) l.per_key.push_back(k.max_in_flight);
  l.queue_max = cfg.budget.queue_max;
  l.queue_timeout = cfg.budget.queue_timeout;
  return l;
}

namespace {

struct slot_claim {
  std::size_t upstream = 0;
  std::int64_t key = -1;
};

// Who holds (or awaits) a slot: a connection actor (lease 0), or one lease of a member's link.
using holder_key = std::pair<caf::actor_addr, std::uint64_t>;

struct waiter {
  caf::actor who;
  std::uint64_t lease = 0;
  slot_claim claim;
  std::int64_t enqueued_ns = 0;
};

// A cluster member's link actor holding leases.
struct lessee {
  caf::actor link;
  std::uint32_t slots = 0;
  std::uint32_t queued = 0;
  bool recalled = false;
};

// Ordered by (priority = request arrival, then sequence): FIFO per arrival, so a retry of an
// older request is not sent behind newer ones.
using queue_key = std::pair<std::int64_t, std::uint64_t>;

struct budget_state {
  budget_limits limits;
  metrics* stats = nullptr;
  caf::node_id node;
  std::uint32_t held = 0;
  std::vector<std::uint32_t> held_upstream;
  std::vector<std::uint32_t> held_key;
  std::map<holder_key, slot_claim> holders;
  std::map<queue_key, waiter> queue;
  std::map<holder_key, queue_key> queued_by;
  std::map<caf::actor_addr, lessee> lessees;
  std::uint64_t next_seq = 0;
  std::int64_t queued_here = 0;

  // The gauges count this node's own connection actors; leases and other nodes' actors are
  // counted by the nodes that run that work.
  bool counts_here(const holder_key& h) const { return h.second == 0 && h.first.node() == node; }

  bool fits(const slot_claim& c) const {
    if (held >= limits.global) return false;
    if (c.upstream < limits.per_upstream.size() &&
        held_upstream[c.upstream] >= limits.per_upstream[c.upstream])
      return false;
    if (c.key >= 0 && static_cast<std::size_t>(c.key) < limits.per_key.size()) {
      auto cap = limits.per_key[c.key];
      if (cap > 0 && held_key[c.key] >= cap) return false;
    }
    return true;
  }

  void take(const holder_key& who, const slot_claim& c) {
    ++held;
    ++held_upstream[c.upstream];
    if (c.key >= 0) ++held_key[c.key];
    holders.emplace(who, c);
    if (who.second != 0) {
      if (auto l = lessees.find(who.first); l != lessees.end()) ++l->second.slots;
    }
    if (stats && counts_here(who)) stats->upstream_work_add(c.upstream, 1);
    if (stats) stats->cluster_slots_set(c.upstream, held_upstream[c.upstream]);
  }

  void give_back(const holder_key& who, const slot_claim& c) {
    --held;
    --held_upstream[c.upstream];
    if (c.key >= 0) --held_key[c.key];
    if (who.second != 0) {
      if (auto l = lessees.find(who.first); l != lessees.end()) --l->second.slots;
    }
    if (stats && counts_here(who)) stats->upstream_work_add(c.upstream, -1);
    if (stats) stats->cluster_slots_set(c.upstream, held_upstream[c.upstream]);
  }

  void enqueue(const holder_key& who, queue_key k, waiter w) {
    queue.emplace(k, std::move(w));
    queued_by.emplace(who, k);
    if (who.second != 0) {
      if (auto l = lessees.find(who.first); l != lessees.end()) ++l->second.queued;
    }
    if (counts_here(who)) ++queued_here;
  }

  // Removes a queue entry; returns the waiter.
  waiter dequeue(std::map<queue_key, waiter>::iterator it) {
    auto w = std::move(it->second);
    holder_key who{w.who.address(), w.lease};
    queued_by.erase(who);
    queue.erase(it);
    if (w.lease != 0) {
      if (auto l = lessees.find(who.first); l != lessees.end()) --l->second.queued;
    }
    if (counts_here(who)) --queued_here;
    return w;
  }

  void publish_depth() {
    if (stats) stats->queue_depth_set(queued_here);
  }
};

void answer(caf::event_based_actor* self, const waiter& w, bool granted, std::string reason) {
  if (w.lease == 0) {
    self->send(w.who, grant_atom::value, granted, std::move(reason));
  } else {
    self->send(w.who, lease_grant_atom::value, w.lease, granted, std::move(reason));
  }
}

}  // namespace

caf::behavior budget_actor(caf::event_based_actor* self, budget_limits limits, metrics* stats) {
  auto st = std::make_shared<budget_state>();
  st->limits = std::move(limits);
  st->stats = stats;
  st->node = self->node();
  st->held_upstream.assign(st->limits.per_upstream.size() + 1, 0);
  st->held_key.assign(st->limits.per_key.size() + 1, 0);

  // A member holding leases gives idle slots back while anyone else waits here.
  auto update_recalls = [self, st] {
    for (auto& [addr, l] : st->lessees) {
      bool want = st->queue.size() > l.queued;
      if (want == l.recalled || (want && l.slots == 0)) continue;
      l.recalled = want;
      self->send(l.link, recall_atom::value, want);
    }
  };

  // Hands freed capacity to the oldest waiters that fit.
  auto drain_queue = [self, st] {
    for (auto it = st->queue.begin(); it != st->queue.end();) {
      if (st->held >= st->limits.global) break;
      if (!st->fits(it->second.claim)) {
        ++it;
        continue;
      }
      auto next = std::next(it);
      auto w = st->dequeue(it);
      it = next;
      holder_key who{w.who.address(), w.lease};
      st->publish_depth();  // before the grant goes out: a reader never sees a granted waiter
                            // queued
      st->take(who, w.claim);
      if (st->stats && st->counts_here(who)) {
        st->stats->queue_wait(static_cast<double>(now_ns() - w.enqueued_ns) / 1e9);
      }
      answer(self, w, true, {});
    }
    st->publish_depth();
  };

  // Grants at once or queues; the caller has checked that `who` is not known yet.
  auto admit = [self, st](waiter w, std::int64_t priority) {
    holder_key who{w.who.address(), w.lease};
    // Fitting now means no older waiter for the same resources is still queued: every
    // release hands capacity to the oldest waiters first (drain_queue).
    if (st->fits(w.claim)) {
      st->take(who, w.claim);
      if (st->stats && st->counts_here(who)) st->stats->queue_wait(0);
      answer(self, w, true, {});
      return;
    }
    if (st->queue.size() >= st->limits.queue_max) {
      answer(self, w, false, "admission queue is full");
      return;
    }
    queue_key k{priority, st->next_seq++};
    st->enqueue(who, k, std::move(w));
    st->publish_depth();
    if (st->limits.queue_timeout.count() > 0) {
      self->delayed_send(self, st->limits.queue_timeout, queue_timeout_atom::value, k.first,
                         k.second);
    }
  };

  self->set_down_handler([st, drain_queue, update_recalls](caf::down_msg& dm) {
    // Everything the source held or awaited: one slot for a connection actor, any number of
    // leases for a member's link (the member died or its connection broke).
    bool freed = false;
    for (auto h = st->holders.lower_bound({dm.source, 0});
         h != st->holders.end() && h->first.first == dm.source;) {
      st->give_back(h->first, h->second);
      h = st->holders.erase(h);
      freed = true;
    }
    // A queued caller that left (or whose deadline passed) leaves the queue, never takes a slot.
    for (auto q = st->queued_by.lower_bound({dm.source, 0});
         q != st->queued_by.end() && q->first.first == dm.source;) {
      auto it = st->queue.find(q->second);
      ++q;
      st->dequeue(it);
    }
    st->lessees.erase(dm.source);
    if (freed) drain_queue();
    st->publish_depth();
    update_recalls();
  });

  return {
      [self, st, admit, update_recalls](acquire_atom, std::uint64_t upstream, std::int64_t key,
                                        std::int64_t priority) {
        auto who = caf::actor_cast<caf::actor>(self->current_sender());
        if (!who) return;
        // Idempotent per holder: a cluster member may ask again on behalf of a connection
        // actor that already holds or awaits a slot here (budget_link_actor after an outage).
        holder_key h{who.address(), 0};
        if (st->holders.count(h) > 0 || st->queued_by.count(h) > 0) return;
        slot_claim claim{static_cast<std::size_t>(upstream), key};
        if (claim.upstream >= st->limits.per_upstream.size()) claim.upstream = 0;
        // Monitor once per holder: each connection actor acquires exactly once.
        self->monitor(who);
        admit(waiter{who, 0, claim, now_ns()}, priority);
        update_recalls();
      },
      [self, st, admit, update_recalls](lease_atom, std::uint64_t upstream, std::int64_t key,
                                        std::int64_t priority, std::uint64_t lease) {
        auto link = caf::actor_cast<caf::actor>(self->current_sender());
        if (!link || lease == 0) return;
        holder_key h{link.address(), lease};
        if (st->holders.count(h) > 0 || st->queued_by.count(h) > 0) return;
        if (st->lessees.count(link.address()) == 0) {
          self->monitor(link);
          st->lessees.emplace(link.address(), lessee{link});
        }
        slot_claim claim{static_cast<std::size_t>(upstream), key};
        if (claim.upstream >= st->limits.per_upstream.size()) claim.upstream = 0;
        admit(waiter{link, lease, claim, now_ns()}, priority);
        update_recalls();
      },
      [self, st, drain_queue, update_recalls](lease_return_atom, std::uint64_t lease) {
        holder_key h{caf::actor_cast<caf::actor_addr>(self->current_sender()), lease};
        if (auto it = st->holders.find(h); it != st->holders.end()) {
          st->give_back(it->first, it->second);
          st->holders.erase(it);
          drain_queue();
        } else if (auto q = st->queued_by.find(h); q != st->queued_by.end()) {
          st->dequeue(st->queue.find(q->second));  // withdrawn: nobody there waits any more
          st->publish_depth();
        }
        update_recalls();
      },
      [self, st, update_recalls](queue_timeout_atom, std::int64_t priority, std::uint64_t seq) {
        auto it = st->queue.find(queue_key{priority, seq});
        if (it == st->queue.end()) return;
        auto w = st->dequeue(it);
        st->publish_depth();
        answer(self, w, false, "waited longer than budget.queue_timeout_ms for a slot");
        update_recalls();
      },
      [st](slots_atom) { return static_cast<std::uint64_t>(st->held); },
      [st](holders_atom) {
        std::vector<caf::actor> who;
        std::vector<std::uint64_t> upstreams;
        std::vector<std::int64_t> keys;
        for (const auto& [h, claim] : st->holders) {
          if (h.second != 0) continue;  // a lease: its member registers its own work
          auto a = caf::actor_cast<caf::actor>(h.first);
          if (!a) continue;  // exiting: its down_msg is on the way
          who.push_back(std::move(a));
          upstreams.push_back(claim.upstream);
          keys.push_back(claim.key);
        }
        return caf::make_message(std::move(who), std::move(upstreams), std::move(keys));
      },
  };
}

}  // namespace tether
