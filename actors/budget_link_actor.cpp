#include "actors/budget_link_actor.hpp"

#include <caf/io/all.hpp>

#include <algorithm>
#include <unordered_map>

#include "actors/access_log.hpp"
#include "actors/budget_actor.hpp"
#include "actors/messages.hpp"

namespace tether {
namespace {

using reconnect_atom = caf::atom_constant<caf::atom("reconnect")>;

constexpr std::chrono::milliseconds first_backoff{100};
constexpr std::chrono::milliseconds max_backoff{2000};

// What a connection actor asked the host for, kept until that actor exits.
struct remote_claim {
  std::uint64_t upstream = 0;
  std::int64_t key = -1;
  std::int64_t priority = 0;
};

struct link_state {
  caf::actor remote;
  // Connection actors whose slot was asked of the host and that are still alive: granted (at
  // work) or still queued there.
  std::unordered_map<caf::actor_addr, remote_claim> remote_claims;
  bool connecting = false;
  bool ever_joined = false;
  bool reported_down = false;
  std::chrono::milliseconds backoff = first_backoff;
};

}  // namespace

caf::behavior budget_link_actor(caf::event_based_actor* self, caf::actor local_budget,
                                std::string host, std::uint16_t port, metrics* stats) {
  auto st = std::make_shared<link_state>();
  auto where = host + ":" + std::to_string(port);
  stats->cluster_connected_set(0);

  auto retry_later = [self, st] {
    self->delayed_send(self, st->backoff, reconnect_atom::value);
    st->backoff = std::min(st->backoff * 2, max_backoff);
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

  self->set_down_handler([st, where, stats, connect, local_budget](caf::down_msg& msg) {
    if (st->remote_claims.erase(msg.source) > 0) return;  // that connection actor is done
    if (!st->remote || msg.source != st->remote.address()) return;
    st->remote = nullptr;
    // The host is gone, and with it its record of what this node runs. Every claim still alive
    // is asked again of the local budget, as its own connection actor: work already granted by
    // the host is then counted here until it ends (the connection actor ignores the second
    // grant), and work still queued at the host queues here. So the local caps hold from the
    // first moment of the outage, not only for requests that arrive after it.
    for (const auto& [addr, claim] : st->remote_claims) {
      if (auto holder = caf::actor_cast<caf::actor>(addr)) {
        caf::send_as(holder, local_budget, acquire_atom::value, claim.upstream, claim.key,
                     claim.priority);
      }
    }
    st->remote_claims.clear();
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
      [self, st, local_budget](acquire_atom a, std::uint64_t upstream, std::int64_t key,
                               std::int64_t priority) {
        // delegate keeps the connection actor as the sender: the budget monitors it directly.
        if (st->remote) {
          auto holder = caf::actor_cast<caf::actor>(self->current_sender());
          if (holder) {
            st->remote_claims.emplace(holder.address(), remote_claim{upstream, key, priority});
            self->monitor(holder);
          }
          self->delegate(st->remote, a, upstream, key, priority);
        } else {
          self->delegate(local_budget, a, upstream, key, priority);
        }
      },
      [self, st, local_budget](slots_atom a) {
        return self->delegate(st->remote ? st->remote : local_budget, a);
      },
      [connect](reconnect_atom) { connect(); },
  };
}

}  // namespace tether
