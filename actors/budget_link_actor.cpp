#include "actors/budget_link_actor.hpp"

#include <caf/io/all.hpp>

#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

#include "actors/access_log.hpp"
#include "actors/actor_timers.hpp"
#include "actors/budget_actor.hpp"
#include "actors/messages.hpp"
#include "actors/policy/admission/lease_book.hpp"
#include "actors/policy/routing/health_bulletin.hpp"

namespace tether {
namespace {

using reconnect_atom = caf::atom_constant<caf::atom("reconnect")>;
using lease_tick_atom = caf::atom_constant<caf::atom("lease_tick")>;

constexpr std::chrono::milliseconds first_backoff{100};
constexpr std::chrono::milliseconds max_backoff{2000};

// How long a request's rate ask waits for the host's verdict before this node's budget gives
// it: less than the request's own bound on the ask (request_actor.cpp), so that the ask is
// counted somewhere.
constexpr std::chrono::seconds rate_wait{4};

// A request's rate ask awaiting the host's verdict.
struct pending_rate {
  caf::response_promise promise;
  std::int64_t key = -1;
  std::uint64_t tokens = 0;
};

// What a connection actor asked the host for, kept until that actor exits.
struct remote_claim {
  std::uint64_t upstream = 0;
  std::int64_t key = -1;
  std::int64_t rank = 0;
  std::uint64_t tokens = 0;
};

class budget_link : public std::enable_shared_from_this<budget_link> {
 public:
  budget_link(caf::event_based_actor* self, caf::actor local_budget, std::string host,
              std::uint16_t port, std::chrono::milliseconds lease_idle, metrics* stats,
              net::timer_service* timers)
      : self_(self),
        local_budget_(std::move(local_budget)),
        host_(std::move(host)),
        port_(port),
        where_(host_ + ":" + std::to_string(port_)),
        stats_(stats),
        book_(lease_idle.count() > 0),
        lease_idle_(lease_idle) {
    timers_.emplace(timers, self->address());
    stats_->cluster_connected_set(0);
  }

  // Non-blocking connect through the middleman actor (never a blocking remote_actor here).
  void connect() {
    if (connecting_ || remote_) return;
    connecting_ = true;
    auto mm = self_->system().middleman().actor_handle();
    self_->request(mm, std::chrono::seconds(2), caf::connect_atom::value, host_, port_)
        .then([me = shared_from_this()](const caf::node_id&, caf::strong_actor_ptr& ptr,
                                        const std::set<std::string>&) { me->connected(ptr); },
              [me = shared_from_this()](caf::error&) { me->unreachable(); });
  }

  void acquire(acquire_atom a, std::uint64_t upstream, std::int64_t key, std::int64_t rank,
               std::uint64_t tokens) {
    if (!remote_) {
      // delegate keeps the connection actor as the sender: the budget monitors it directly.
      self_->delegate(local_budget_, a, upstream, key, rank, tokens);
      return;
    }
    auto holder = caf::actor_cast<caf::actor>(self_->current_sender());
    if (!holder) return;
    auto id = holder.id();
    if (!book_.knows(id)) {
      holders_[id] = holder;
      self_->monitor(holder);
    }
    apply(book_.acquire(id, {upstream, key, tokens}, rank, now_ns()));
  }

  // Rates are the host's to count, for the whole cluster; cut off from it, this node counts
  // them alone. The host's verdict is awaited here: an ask still unanswered when the host is
  // lost (a silent link is found out only after cluster_silence), or unanswered for longer than
  // rate_wait, is asked of this node's budget, so it is counted alone rather than admitted
  // uncounted when the request stops waiting. Without a host, delegate: this node's budget
  // answers the request actor itself.
  void rate(rate_atom a, std::int64_t key, std::uint64_t tokens) {
    if (!remote_) {
      self_->delegate(local_budget_, a, key, tokens);
      return;
    }
    const auto id = next_rate_++;
    pending_rates_.emplace(id, pending_rate{self_->make_response_promise(), key, tokens});
    self_->request(remote_, rate_wait, a, key, tokens)
        .then(
            [me = shared_from_this(), id](bool admitted, bool never, std::int64_t retry_after_ms,
                                          std::int64_t charged_second, std::string& reason) {
              auto it = me->pending_rates_.find(id);
              if (it == me->pending_rates_.end()) return;  // asked locally meanwhile
              it->second.promise.deliver(admitted, never, retry_after_ms, charged_second,
                                         std::move(reason));
              me->pending_rates_.erase(it);
            },
            [me = shared_from_this(), id](caf::error&) { me->rate_locally(id); });
  }

  void rate_fix(rate_fix_atom a, std::int64_t key, std::int64_t second, std::uint64_t estimate,
                std::uint64_t actual) {
    self_->send(remote_ ? remote_ : local_budget_, a, key, second, estimate, actual);
  }

  void lease_answered(std::uint64_t lease, slot_refusal why, const std::string& reason) {
    if (!remote_ || self_->current_sender() != caf::actor_cast<caf::strong_actor_ptr>(remote_)) {
      return;  // from a host this node has lost: those leases are gone with it
    }
    apply(book_.answered(lease, why, reason, now_ns()));
  }

  // The node drains (from its supervisor, at the drain's end): no waiter here or at the host is
  // granted any more, and the node's own budget, which serves an outage, refuses too.
  void drain_now() {
    apply(book_.stop_taking_work("the gateway is shutting down"));
    self_->send(local_budget_, drain_now_atom::value);
  }

  void recalled(bool on, std::int32_t scope, std::int64_t index) {
    if (remote_) apply(book_.recall(on, static_cast<recall_scope>(scope), index));
  }

  void lease_tick() {
    tick_pending_ = false;
    apply(book_.expire_idle(
        now_ns(), std::chrono::duration_cast<std::chrono::nanoseconds>(lease_idle_).count()));
  }

  // What this node holds: leased slots at work here, and its own budget's (outage) slots.
  caf::result<std::uint64_t> slots(slots_atom a) {
    auto rp = self_->make_response_promise<std::uint64_t>();
    self_->request(local_budget_, std::chrono::seconds(2), a)
        .then([me = shared_from_this(),
               rp](std::uint64_t n) mutable { rp.deliver(n + me->book_.busy()); },
              [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
    return rp;
  }

  // Health news (actors/budget_actor.hpp): this node's health actors subscribe here, and the link
  // subscribes to the host on their behalf each time it joins. Cut off from the host, the node
  // keeps its own view; its ejections still running when it joins (again) are reported then, so
  // an outage, or a new host with no record, loses none of its evidence. The link joins while
  // the node is still starting, before its health actor subscribes: the host's news is kept
  // here and a subscriber is told what still runs, as the host tells a joining node.
  void subscribe_locally() {
    auto who = caf::actor_cast<caf::actor>(self_->current_sender());
    if (!who || !subscribers_.emplace(who.address(), who).second) return;
    self_->monitor(who);
    for (const auto& n : cluster_news_.running(now_ns()))
      self_->send(who, health_news_atom::value, n.upstream, n.reason, n.remaining_ms);
  }

  void report(const std::string& upstream, std::int32_t reason, std::int64_t duration_ms) {
    own_reports_.post(upstream, reason, duration_ms, now_ns());
    if (remote_) self_->send(remote_, health_report_atom::value, upstream, reason, duration_ms);
  }

  void news(const std::string& upstream, std::int32_t reason, std::int64_t remaining_ms) {
    if (!remote_ || self_->current_sender() != caf::actor_cast<caf::strong_actor_ptr>(remote_))
      return;
    cluster_news_.post(upstream, reason, remaining_ms, now_ns());
    for (const auto& [addr, who] : subscribers_)
      self_->send(who, health_news_atom::value, upstream, reason, remaining_ms);
  }

  void down(const caf::down_msg& msg) {
    if (subscribers_.erase(msg.source) > 0) return;
    if (remote_claims_.erase(msg.source) > 0) return;  // that connection actor is done
    if (remote_ && msg.source == remote_.address()) {
      host_lost();
    } else {
      holder_gone(msg.source.id());
    }
  }

 private:
  void connected(const caf::strong_actor_ptr& ptr) {
    connecting_ = false;
    if (!ptr) {
      retry_later();
      return;
    }
    remote_ = caf::actor_cast<caf::actor>(ptr);
    self_->monitor(remote_);
    self_->send(remote_, health_subscribe_atom::value);
    for (const auto& n : own_reports_.running(now_ns()))
      self_->send(remote_, health_report_atom::value, n.upstream, n.reason, n.remaining_ms);
    if (ever_joined_) register_local_work();
    backoff_ = first_backoff;
    reported_down_ = false;
    stats_->cluster_connected_set(1);
    log_info(std::string{ever_joined_ ? "rejoined" : "joined"} + " the shared budget at " + where_);
    ever_joined_ = true;
  }

  void unreachable() {
    connecting_ = false;
    if (!reported_down_) {
      // Said once per outage, not once per retry.
      log_warn("shared budget at " + where_ +
               " unreachable; applying this node's own caps until it is back");
      reported_down_ = true;
    }
    retry_later();
  }

  void retry_later() {
    timers_->after(backoff_, reconnect_atom::value);
    backoff_ = std::min(backoff_ * 2, max_backoff);
  }

  // After a rejoin: the work this node started alone during the outage is registered with the
  // host as a claim of its own connection actor (rank 0: it runs already, so it goes before
  // any waiter), so the shared cap counts it until it ends. The holder ignores the grant.
  void register_local_work() {
    self_->request(local_budget_, std::chrono::seconds(2), holders_atom::value)
        .then([me = shared_from_this()](
                  std::vector<caf::actor>& who, std::vector<std::uint64_t>& upstreams,
                  std::vector<std::int64_t>& keys, std::vector<std::uint64_t>& tokens) {
          me->register_with_host(who, upstreams, keys, tokens);
        });
  }

  void register_with_host(const std::vector<caf::actor>& who,
                          const std::vector<std::uint64_t>& upstreams,
                          const std::vector<std::int64_t>& keys,
                          const std::vector<std::uint64_t>& tokens) {
    if (!remote_) return;
    for (std::size_t i = 0; i < who.size(); ++i) {
      caf::send_as(who[i], remote_, acquire_atom::value, upstreams[i], keys[i], std::int64_t{0},
                   tokens[i]);
      remote_claims_.emplace(who[i].address(), remote_claim{upstreams[i], keys[i], 0, tokens[i]});
      self_->monitor(who[i]);
    }
  }

  // A local connection actor exited: its leased slot is freed, or its wait ends.
  void holder_gone(lease_book::holder id) {
    if (book_.knows(id)) apply(book_.holder_gone(id, now_ns()));
    if (!book_.knows(id)) holders_.erase(id);
  }

  // The host is gone, and with it its record of what this node runs. Every claim still alive is
  // asked again of the local budget, as its own connection actor: work already granted by the
  // host is then counted here until it ends (the connection actor ignores the second grant), and
  // work still queued at the host queues here. So the local caps hold from the first moment of
  // the outage, not only for requests that arrive after it.
  void host_lost() {
    remote_ = nullptr;
    auto lost = book_.drop_all();
    for (const auto& c : lost.busy) {
      stats_->upstream_work_add(c.pool.upstream, -1);  // the local budget counts it from now on
      ask_locally(holders_[c.who], c.pool, c.rank);
    }
    for (const auto& c : lost.waiting) {
      ask_locally(holders_[c.who], c.pool, c.rank);
    }
    holders_.clear();
    for (const auto& [addr, claim] : remote_claims_) {
      ask_locally(caf::actor_cast<caf::actor>(addr), {claim.upstream, claim.key, claim.tokens},
                  claim.rank);
    }
    remote_claims_.clear();
    std::vector<std::uint64_t> unanswered;
    for (const auto& [id, ask] : pending_rates_) unanswered.push_back(id);
    for (auto id : unanswered) rate_locally(id);
    stats_->queue_depth_set(metrics::queue_owner::link, 0);
    stats_->cluster_connected_set(0);
    if (!reported_down_) {
      log_warn("lost the shared budget at " + where_ +
               "; applying this node's own caps until it is back");
      reported_down_ = true;
    }
    connect();
  }

  void rate_locally(std::uint64_t id) {
    auto it = pending_rates_.find(id);
    if (it == pending_rates_.end()) return;
    it->second.promise.delegate(local_budget_, rate_atom::value, it->second.key, it->second.tokens);
    pending_rates_.erase(it);
  }

  void ask_locally(const caf::actor& holder, const lease_book::pool_key& pool, std::int64_t rank) {
    if (holder) {
      caf::send_as(holder, local_budget_, acquire_atom::value, pool.upstream, pool.key, rank,
                   pool.tokens);
    }
  }

  // Carries out what the lease book decided.
  void apply(const lease_book::actions& act) {
    for (const auto& g : act.grants) {
      stats_->upstream_work_add(g.pool.upstream, 1);
      stats_->queue_wait(static_cast<double>(g.waited_ns) / 1e9);
      if (const auto& who = holders_[g.who]) send_grant(self_, who, slot_refusal::none);
    }
    for (const auto& r : act.refusals) {
      if (const auto& who = holders_[r.who]) send_grant(self_, who, r.why, r.reason);
      holders_.erase(r.who);
    }
    for (const auto& e : act.work_ended) stats_->upstream_work_add(e.upstream, -1);
    if (remote_) {
      for (const auto& a : act.asks) {
        self_->send(remote_, lease_atom::value, a.pool.upstream, a.pool.key, a.rank, a.pool.tokens,
                    a.id);
      }
      for (auto id : act.returns) self_->send(remote_, lease_return_atom::value, id);
    }
    stats_->queue_depth_set(metrics::queue_owner::link, static_cast<std::int64_t>(book_.waiting()));
    schedule_idle_tick();
  }

  // One tick at a time, due when the oldest idle slot has been idle for lease_idle.
  void schedule_idle_tick() {
    std::int64_t since = 0;
    if (tick_pending_ || !book_.oldest_idle(since)) return;
    tick_pending_ = true;
    auto due = std::chrono::nanoseconds{since - now_ns()} + lease_idle_;
    timers_->after(std::max<std::chrono::nanoseconds>(due, std::chrono::milliseconds{1}),
                   lease_tick_atom::value);
  }

  caf::event_based_actor* self_;
  caf::actor local_budget_;
  std::string host_;
  std::uint16_t port_;
  std::string where_;
  metrics* stats_;
  caf::actor remote_;
  // Slots leased from the host and the local connection actors using or awaiting them.
  lease_book book_;
  // Strong handles: a connection actor waiting for its grant is referenced by nothing else, and
  // an actor nobody references is gone (exit_reason::unreachable).
  std::unordered_map<lease_book::holder, caf::actor> holders_;
  // How long a leased slot nobody uses stays with this node ([cluster] lease_idle_ms). Long is
  // cheap: while another node waits, the host recalls idle slots at once.
  std::chrono::milliseconds lease_idle_;
  bool tick_pending_ = false;
  // Work started during an outage and registered with the host on rejoin, as claims of its own
  // connection actors (alive: granted, or still queued there).
  std::unordered_map<caf::actor_addr, remote_claim> remote_claims_;
  std::unordered_map<std::uint64_t, pending_rate> pending_rates_;  // rate asks at the host
  std::uint64_t next_rate_ = 0;
  std::unordered_map<caf::actor_addr, caf::actor> subscribers_;  // this node's health actors
  health_bulletin own_reports_;   // this node's own ejections, told again at each join
  health_bulletin cluster_news_;  // the host's news, told to a health actor subscribing late
  bool connecting_ = false;
  bool ever_joined_ = false;
  bool reported_down_ = false;
  std::chrono::milliseconds backoff_ = first_backoff;
  std::optional<actor_timers> timers_;  // reconnect backoff, lease idle ticks
};

}  // namespace

caf::behavior budget_link_actor(caf::event_based_actor* self, caf::actor local_budget,
                                std::string host, std::uint16_t port,
                                std::chrono::milliseconds lease_idle, metrics* stats,
                                net::timer_service* timers) {
  auto st = std::make_shared<budget_link>(self, std::move(local_budget), std::move(host), port,
                                          lease_idle, stats, timers);
  self->set_down_handler([st](caf::down_msg& msg) { st->down(msg); });
  st->connect();
  return {
      [st](acquire_atom a, std::uint64_t upstream, std::int64_t key, std::int64_t rank,
           std::uint64_t tokens) { st->acquire(a, upstream, key, rank, tokens); },
      [st](rate_atom a, std::int64_t key, std::uint64_t tokens) { st->rate(a, key, tokens); },
      [st](rate_fix_atom a, std::int64_t key, std::int64_t second, std::uint64_t estimate,
           std::uint64_t actual) { st->rate_fix(a, key, second, estimate, actual); },
      [st](lease_grant_atom, std::uint64_t lease, std::int32_t why, const std::string& reason) {
        st->lease_answered(lease, static_cast<slot_refusal>(why), reason);
      },
      [st](recall_atom, bool on, std::int32_t scope, std::int64_t index) {
        st->recalled(on, scope, index);
      },
      [st](drain_now_atom) { st->drain_now(); },
      [st](lease_tick_atom) { st->lease_tick(); },
      [st](slots_atom a) { return st->slots(a); },
      [st](reconnect_atom) { st->connect(); },
      [st](health_subscribe_atom) { st->subscribe_locally(); },
      [st](health_report_atom, const std::string& upstream, std::int32_t reason,
           std::int64_t duration_ms) { st->report(upstream, reason, duration_ms); },
      [st](health_news_atom, const std::string& upstream, std::int32_t reason,
           std::int64_t remaining_ms) { st->news(upstream, reason, remaining_ms); },
  };
}

}  // namespace tether
