#include "actors/budget_link_actor.hpp"

#include <caf/io/all.hpp>

#include <algorithm>

#include "actors/access_log.hpp"
#include "actors/messages.hpp"

namespace tether {
namespace {

using reconnect_atom = caf::atom_constant<caf::atom("reconnect")>;

constexpr std::chrono::milliseconds first_backoff{100};
constexpr std::chrono::milliseconds max_backoff{2000};

struct link_state {
  caf::actor remote;
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

  // Non-blocking connect through the middleman actor (never a blocking remote_actor here).
  auto connect = [self, st, host, port, where, stats, retry_later] {
    if (st->connecting || st->remote) return;
    st->connecting = true;
    auto mm = self->system().middleman().actor_handle();
    self->request(mm, std::chrono::seconds(2), caf::connect_atom::value, host, port)
        .then(
            [self, st, where, stats, retry_later](const caf::node_id&, caf::strong_actor_ptr& ptr,
                                                  const std::set<std::string>&) {
              st->connecting = false;
              if (!ptr) {
                retry_later();
                return;
              }
              st->remote = caf::actor_cast<caf::actor>(ptr);
              self->monitor(st->remote);
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

  self->set_down_handler([st, where, stats, connect](caf::down_msg& msg) {
    if (!st->remote || msg.source != st->remote.address()) return;
    st->remote = nullptr;
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
