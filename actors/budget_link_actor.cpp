#include "actors/budget_link_actor.hpp"

#include <caf/io/all.hpp>

#include <algorithm>
#include <unordered_map>

#include "actors/access_log.hpp"
#include "actors/budget_actor.hpp"
#include "actors/messages.hpp"
#include "actors/policy/lease_book.hpp"

namespace tether {
namespace {

using reconnect_atom = caf::atom_constant<caf::atom("reconnect")>;
using lease_tick_atom = caf::atom_constant<caf::atom("lease_tick")>;

constexpr std::chrono::milliseconds first_backoff{100};
constexpr std::chrono::milliseconds max_backoff{2000};

// What a connection actor asked the host for, kept until that actor exits.
struct remote_claim {
  std::uint64_t upstream = 0;
  std::int64_t key = -1;
  std::int64_t priority = 0;
};

struct link_state {
  explicit link_state(std::chrono::milliseconds idle) : book(idle.count() > 0), lease_idle(idle) {}
  caf::actor remote;
  // Slots leased from the host and the local connection actors using or awaiting them.
  lease_book book;
  // Strong handles: a connection actor waiting for its grant is referenced by nothing else, and
  // an actor nobody references is gone (exit_reason::unreachable).
  std::unordered_map<lease_book::holder, caf::actor> holders;
  // How long a leased slot nobody uses stays with this node ([cluster] lease_idle_ms). Long is
  // cheap: while another node waits, the host recalls idle slots at once.
  std::chrono::milliseconds lease_idle;
  bool tick_pending = false;
  // Work started during an outage and registered with the host on rejoin, as claims of its own
  // connection actors (alive: granted, or still queued there).
  std::unordered_map<caf::actor_addr, remote_claim> remote_claims;
  bool connecting = false;
  bool ever_joined = false;
  bool reported_down = false;
  std::chrono::milliseconds backoff = first_backoff;
};

}  // namespace

caf::behavior budget_link_actor(caf::event_based_actor* self, caf::actor local_budget,
                                std::string host, std::uint16_t port,
                                std::chrono::milliseconds lease_idle, metrics* stats) {
  auto st = std::make_shared<link_state>(lease_idle);
  auto where = host + ":" + std::to_string(port);
  stats->cluster_connected_set(0);

  auto retry_later = [self, st] {
    self->delayed_send(self, st->backoff, reconnect_atom::value);
    st->backoff = std::min(st->backoff * 2, max_backoff);
  };

  // Carries out what the lease book decided.
  auto apply = [self, st, stats](const lease_book::actions& act) {
    for (const auto& g : act.grants) {
      stats->upstream_work_add(g.pool.first, 1);
      stats->queue_wait(static_cast<double>(g.waited_ns) / 1e9);
      if (const auto& who = st->holders[g.who])
        self->send(who, grant_atom::value, true, std::string{});
    }
    for (const auto& r : act.refusals) {
      if (const auto& who = st->holders[r.who]) self->send(who, grant_atom::value, false, r.reason);
      st->holders.erase(r.who);
    }
    for (const auto& e : act.work_ended) stats->upstream_work_add(e.first, -1);
    if (st->remote) {
      for (const auto& a : act.asks) {
        self->send(st->remote, lease_atom::value, a.pool.first, a.pool.second, a.priority, a.id);
      }
      for (auto id : act.returns) self->send(st->remote, lease_return_atom::value, id);
    }
    stats->queue_depth_set(static_cast<std::int64_t>(st->book.waiting()));
    std::int64_t since = 0;
    if (!st->tick_pending && st->book.oldest_idle(since)) {
      st->tick_pending = true;
      auto due = std::chrono::nanoseconds{since - now_ns()} + st->lease_idle;
      self->delayed_send(self,
                         std::max<std::chrono::nanoseconds>(due, std::chrono::milliseconds{1}),
                         lease_tick_atom::value);
    }
  };

  // After a rejoin: the work this node started alone during the outage is registered with the
  // host as a claim of its own connection actor (priority 0: it runs already, so it goes before
  // any waiter), so the shared cap counts it until it ends. The holder ignores the grant.
  auto register_local_work = [self, st, local_budget] {
    self->request(local_budget, std::chrono::seconds(2), holders_atom::value)
        .then([self, st](std::vector<caf::actor>& who, std::vector<std::uint64_t>& upstreams,
                         std::vector<std::int64_t>& keys) {
          if (!st->remote) return;
          for (std::size_t i = 0; i < who.size(); ++i) {
            caf::send_as(who[i], st->remote, acquire_atom::value, upstreams[i], keys[i],
                         std::int64_t{0});
            st->remote_claims.emplace(who[i].address(), remote_claim{upstreams[i], keys[i], 0});
            self->monitor(who[i]);
          }
        });
  };

  // Non-blocking connect through the middleman actor (never a blocking remote_actor here).
  auto connect = [self, st, host, port, where, stats, retry_later, register_local_work] {
    if (st->connecting || st->remote) return;
    st->connecting = true;
    auto mm = self->system().middleman().actor_handle();
    self->request(mm, std::chrono::seconds(2), caf::connect_atom::value, host, port)
        .then(
            [self, st, where, stats, retry_later, register_local_work](
                const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
              st->connecting = false;
              if (!ptr) {
                retry_later();
                return;
              }
              st->remote = caf::actor_cast<caf::actor>(ptr);
              self->monitor(st->remote);
              if (st->ever_joined) register_local_work();
              st->backoff = first_backoff;
              st->reported_down = false;
              stats->cluster_connected_set(1);
              log_info(std::string{st->ever_joined ? "rejoined" : "joined"} +
                       " the shared budget at " + where);
              st->ever_joined = true;
            },
            [st, where, retry_later](caf::error&) {
              st->connecting = false;
              if (!st->reported_down) {
                // Said once per outage, not once per retry.
                log_warn("shared budget at " + where +
                         " unreachable; applying this node's own caps until it is back");
                st->reported_down = true;
              }
              retry_later();
            });
  };

  self->set_down_handler([st, where, stats, connect, local_budget, apply](caf::down_msg& msg) {
    if (st->remote_claims.erase(msg.source) > 0) return;  // that connection actor is done
    if (!st->remote || msg.source != st->remote.address()) {
      auto id = msg.source.id();
      if (st->book.knows(id)) apply(st->book.holder_gone(id, now_ns()));
      if (!st->book.knows(id)) st->holders.erase(id);
      return;
    }
    st->remote = nullptr;
    // The host is gone, and with it its record of what this node runs. Every claim still alive
    // is asked again of the local budget, as its own connection actor: work already granted by
    // the host is then counted here until it ends (the connection actor ignores the second
    // grant), and work still queued at the host queues here. So the local caps hold from the
    // first moment of the outage, not only for requests that arrive after it.
    auto ask_locally = [&](const caf::actor& holder, std::uint64_t upstream, std::int64_t key,
                           std::int64_t priority) {
      if (holder) caf::send_as(holder, local_budget, acquire_atom::value, upstream, key, priority);
    };
    auto lost = st->book.drop_all();
    for (const auto& c : lost.busy) {
      stats->upstream_work_add(c.pool.first, -1);  // the local budget counts it from now on
      ask_locally(st->holders[c.who], c.pool.first, c.pool.second, c.priority);
    }
    for (const auto& c : lost.waiting) {
      ask_locally(st->holders[c.who], c.pool.first, c.pool.second, c.priority);
    }
    st->holders.clear();
    for (const auto& [addr, claim] : st->remote_claims) {
      ask_locally(caf::actor_cast<caf::actor>(addr), claim.upstream, claim.key, claim.priority);
    }
    st->remote_claims.clear();
    stats->queue_depth_set(0);
    stats->cluster_connected_set(0);
    if (!st->reported_down) {
      log_warn("lost the shared budget at " + where +
               "; applying this node's own caps until it is back");
      st->reported_down = true;
    }
    connect();
  });

  connect();

  return {
      [self, st, local_budget, apply](acquire_atom a, std::uint64_t upstream, std::int64_t key,
                                      std::int64_t priority) {
        if (!st->remote) {
          // delegate keeps the connection actor as the sender: the budget monitors it directly.
          self->delegate(local_budget, a, upstream, key, priority);
          return;
        }
        auto holder = caf::actor_cast<caf::actor>(self->current_sender());
        if (!holder) return;
        auto id = holder.id();
        if (!st->book.knows(id)) {
          st->holders[id] = holder;
          self->monitor(holder);
        }
        apply(st->book.acquire(id, {upstream, key}, priority, now_ns()));
      },
      [self, st, apply](lease_grant_atom, std::uint64_t lease, bool granted,
                        const std::string& reason) {
        if (!st->remote ||
            self->current_sender() != caf::actor_cast<caf::strong_actor_ptr>(st->remote)) {
          return;  // from a host this node has lost: those leases are gone with it
        }
        apply(st->book.answered(lease, granted, reason, now_ns()));
      },
      [st, apply](recall_atom, bool on) {
        if (st->remote) apply(st->book.recall(on));
      },
      [st, apply](lease_tick_atom) {
        st->tick_pending = false;
        apply(st->book.expire_idle(
            now_ns(),
            std::chrono::duration_cast<std::chrono::nanoseconds>(st->lease_idle).count()));
      },
      [self, st, local_budget](slots_atom a) -> caf::result<std::uint64_t> {
        // What this node holds: leased slots at work here, and its own budget's (outage) slots.
        auto rp = self->make_response_promise<std::uint64_t>();
        self->request(local_budget, std::chrono::seconds(2), a)
            .then([st, rp](std::uint64_t n) mutable { rp.deliver(n + st->book.busy()); },
                  [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
        return rp;
      },
      [connect](reconnect_atom) { connect(); },
  };
}

}  // namespace tether
