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

struct waiter {
  caf::actor who;
  slot_claim claim;
  std::int64_t enqueued_ns = 0;
};

// Ordered by (priority = request arrival, then sequence): FIFO per arrival, so a retry of an
// older request is not sent behind newer ones.
using queue_key = std::pair<std::int64_t, std::uint64_t>;

struct budget_state {
  budget_limits limits;
  metrics* stats = nullptr;
  std::uint32_t held = 0;
  std::vector<std::uint32_t> held_upstream;
  std::vector<std::uint32_t> held_key;
  std::map<caf::actor_addr, slot_claim> holders;
  std::map<queue_key, waiter> queue;
  std::map<caf::actor_addr, queue_key> queued_by;
  std::uint64_t next_seq = 0;

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

  void take(const caf::actor_addr& who, const slot_claim& c) {
    ++held;
    ++held_upstream[c.upstream];
    if (c.key >= 0) ++held_key[c.key];
    holders.emplace(who, c);
    if (stats) stats->upstream_work_add(c.upstream, 1);
  }

  void give_back(const slot_claim& c) {
    --held;
    --held_upstream[c.upstream];
    if (c.key >= 0) --held_key[c.key];
    if (stats) stats->upstream_work_add(c.upstream, -1);
  }

  void publish_depth() {
    if (stats) stats->queue_depth_set(static_cast<std::int64_t>(queue.size()));
  }
};

}  // namespace

caf::behavior budget_actor(caf::event_based_actor* self, budget_limits limits, metrics* stats) {
  auto st = std::make_shared<budget_state>();
  st->limits = std::move(limits);
  st->stats = stats;
  st->held_upstream.assign(st->limits.per_upstream.size() + 1, 0);
  st->held_key.assign(st->limits.per_key.size() + 1, 0);

  // Hands freed capacity to the oldest waiters that fit.
  auto drain_queue = [self, st] {
    for (auto it = st->queue.begin(); it != st->queue.end();) {
      if (st->held >= st->limits.global) break;
      if (!st->fits(it->second.claim)) {
        ++it;
        continue;
      }
      auto w = std::move(it->second);
      st->queued_by.erase(w.who.address());
      it = st->queue.erase(it);
      st->publish_depth();  // before the grant goes out: a reader never sees a granted waiter
                            // queued
      st->take(w.who.address(), w.claim);
      if (st->stats) st->stats->queue_wait(static_cast<double>(now_ns() - w.enqueued_ns) / 1e9);
      self->send(w.who, grant_atom::value, true, std::string{});
    }
    st->publish_depth();
  };

  self->set_down_handler([st, drain_queue](caf::down_msg& dm) {
    if (auto h = st->holders.find(dm.source); h != st->holders.end()) {
      st->give_back(h->second);
      st->holders.erase(h);
      drain_queue();
      return;
    }
    if (auto q = st->queued_by.find(dm.source); q != st->queued_by.end()) {
      // A queued caller left (or its deadline passed): it leaves the queue, never takes a slot.
      st->queue.erase(q->second);
      st->queued_by.erase(q);
      st->publish_depth();
    }
  });

  return {
      [self, st](acquire_atom, std::uint64_t upstream, std::int64_t key, std::int64_t priority) {
        auto who = caf::actor_cast<caf::actor>(self->current_sender());
        if (!who) return;
        // Idempotent per holder: a cluster member may ask again on behalf of a connection
        // actor that already holds or awaits a slot here (budget_link_actor after an outage).
        if (st->holders.count(who.address()) > 0 || st->queued_by.count(who.address()) > 0) return;
        slot_claim claim{static_cast<std::size_t>(upstream), key};
        if (claim.upstream >= st->limits.per_upstream.size()) claim.upstream = 0;
        // Monitor once per holder: each connection actor acquires exactly once.
        self->monitor(who);
        // Fitting now means no older waiter for the same resources is still queued: every
        // release hands capacity to the oldest waiters first (drain_queue).
        if (st->fits(claim)) {
          st->take(who.address(), claim);
          if (st->stats) st->stats->queue_wait(0);
          self->send(who, grant_atom::value, true, std::string{});
          return;
        }
        if (st->queue.size() >= st->limits.queue_max) {
          self->send(who, grant_atom::value, false, std::string{"admission queue is full"});
          return;
        }
        queue_key k{priority, st->next_seq++};
        st->queue.emplace(k, waiter{who, claim, now_ns()});
        st->queued_by.emplace(who.address(), k);
        st->publish_depth();
        if (st->limits.queue_timeout.count() > 0) {
          self->delayed_send(self, st->limits.queue_timeout, queue_timeout_atom::value, k.first,
                             k.second);
        }
      },
      [self, st](queue_timeout_atom, std::int64_t priority, std::uint64_t seq) {
        auto it = st->queue.find(queue_key{priority, seq});
        if (it == st->queue.end()) return;
        auto who = it->second.who;
        st->queued_by.erase(who.address());
        st->queue.erase(it);
        st->publish_depth();
        self->send(who, grant_atom::value, false,
                   std::string{"waited longer than budget.queue_timeout_ms for a slot"});
      },
      [st](slots_atom) { return static_cast<std::uint64_t>(st->held); },
      [st](holders_atom) {
        std::vector<caf::actor> who;
        std::vector<std::uint64_t> upstreams;
        std::vector<std::int64_t> keys;
        for (const auto& [addr, claim] : st->holders) {
          auto a = caf::actor_cast<caf::actor>(addr);
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
