#include "actors/budget_actor.hpp"

#include <map>
#include <optional>
#include <unordered_map>

#include "actors/actor_timers.hpp"
#include "actors/messages.hpp"
#include "actors/policy/admission/rate_book.hpp"
#include "actors/policy/admission/slot_book.hpp"
#include "actors/policy/routing/health_bulletin.hpp"

namespace tether {

budget_limits budget_limits_from(const config::gateway_config& cfg) {
  budget_limits l;
  l.global = cfg.budget.max_in_flight;
  for (const auto& u : cfg.upstreams) {
    l.per_upstream.push_back(u.max_in_flight);
    l.tokens_per_upstream.push_back(u.max_tokens_in_flight);
  }
  for (const auto& k : cfg.keys) {
    l.per_key.push_back(k.max_in_flight);
    l.rpm.push_back(k.rpm);
    l.tpm.push_back(k.tpm);
    l.weight.push_back(k.weight);
  }
  l.queue_max = cfg.budget.queue_max;
  l.queue_timeout = cfg.budget.queue_timeout;
  return l;
}

namespace {

// The book's owner ids and the actors behind them. A connection actor is referenced strongly
// only while its answer is due: a waiter may be referenced by nothing else (an actor nobody
// references is gone), while a holder must stay free to become unreachable and exit, since only
// its exit frees the slot. A member's link is referenced for as long as it leases.
class budget {
 public:
  budget(caf::event_based_actor* self, const budget_limits& limits, metrics* stats,
         net::timer_service* timers)
      : self_(self),
        stats_(stats),
        queue_timeout_(limits.queue_timeout),
        book_(caps_of(limits)),
        rates_(rates_of(limits)) {
    if (timers) timers_.emplace(timers, self->address());
  }

  static slot_book::caps caps_of(const budget_limits& limits) {
    return {limits.global,    limits.per_upstream,        limits.per_key,
            limits.queue_max, limits.tokens_per_upstream, limits.weight};
  }

  static std::vector<rate_book::limits> rates_of(const budget_limits& limits) {
    std::vector<rate_book::limits> out(std::max(limits.rpm.size(), limits.tpm.size()));
    for (std::size_t k = 0; k < limits.rpm.size(); ++k) out[k].rpm = limits.rpm[k];
    for (std::size_t k = 0; k < limits.tpm.size(); ++k) out[k].tpm = limits.tpm[k];
    return out;
  }

  caf::message rate(std::int64_t key, std::uint64_t tokens) {
    auto v = rates_.admit(key, tokens, now_ns());
    return caf::make_message(v.admitted, v.never, v.retry_after_ms, v.charged_second,
                             std::move(v.reason));
  }

  void rate_fix(std::int64_t key, std::int64_t second, std::uint64_t estimate,
                std::uint64_t actual) {
    rates_.correct(key, second, estimate, actual, now_ns());
  }

  void acquire(const caf::actor& who, std::uint64_t upstream, std::int64_t key, std::int64_t rank,
               std::uint64_t tokens) {
    auto id = enter(who);
    if (book_.knows({id, 0})) return;  // asked again by a member after an outage: see the book
    handles_[id] = who;
    bool local = who.node() == self_->node();
    carry_out(book_.acquire(id, upstream, key, rank, tokens, local, now_ns()));
  }

  void lease(const caf::actor& link, std::uint64_t id, std::uint64_t upstream, std::int64_t key,
             std::int64_t rank, std::uint64_t tokens) {
    auto owner = enter(link);
    handles_[owner] = link;
    carry_out(book_.lease(owner, id, upstream, key, rank, tokens, now_ns()));
  }

  void lease_return(const caf::actor_addr& from, std::uint64_t lease) {
    if (auto o = owners_.find(from); o != owners_.end())
      carry_out(book_.give_back({o->second, lease}, now_ns()));
  }

  void timed_out(slot_book::ticket t) { carry_out(book_.timed_out(t)); }
  void refuse_local() { carry_out(book_.refuse_local("the gateway is shutting down")); }

  void gone(const caf::actor_addr& source) {
    subscribers_.erase(source);
    auto o = owners_.find(source);
    if (o == owners_.end()) return;
    auto id = o->second;
    carry_out(book_.owner_gone(id, now_ns()));
    handles_.erase(id);
    owners_.erase(o);
  }

  std::uint64_t slots() const { return book_.held(); }

  // The ejections running now first, so that a node joining late starts with the cluster's view.
  void subscribe(const caf::actor& who) {
    if (!who) return;
    if (subscribers_.emplace(who.address(), who).second) self_->monitor(who);
    for (const auto& n : bulletin_.running(now_ns()))
      self_->send(who, health_news_atom::value, n.upstream, n.reason, n.remaining_ms);
  }

  void report(const caf::actor_addr& from, const std::string& upstream, std::int32_t reason,
              std::int64_t duration_ms) {
    bulletin_.post(upstream, reason, duration_ms, now_ns());
    for (const auto& [addr, who] : subscribers_) {
      if (addr != from) self_->send(who, health_news_atom::value, upstream, reason, duration_ms);
    }
  }

  void set_limits(const budget_limits& limits) {
    queue_timeout_ = limits.queue_timeout;
    rates_.set_limits(rates_of(limits));
    carry_out(book_.set_caps(caps_of(limits), now_ns()));
  }

  // The connection actors holding a slot now; leases are left out, as their member registers its
  // own work.
  caf::message holders() const {
    std::vector<caf::actor> who;
    std::vector<std::uint64_t> upstreams;
    std::vector<std::int64_t> keys;
    std::vector<std::uint64_t> tokens;
    for (const auto& [addr, id] : owners_) {
      auto claim = book_.held_by({id, 0});
      if (!claim) continue;
      auto a = caf::actor_cast<caf::actor>(addr);
      if (!a) continue;  // exiting: its down_msg is on the way
      who.push_back(std::move(a));
      upstreams.push_back(claim->upstream);
      keys.push_back(claim->key);
      tokens.push_back(claim->tokens);
    }
    return caf::make_message(std::move(who), std::move(upstreams), std::move(keys),
                             std::move(tokens));
  }

 private:
  // The owner id of an actor, minted (and the actor monitored) the first time it asks.
  slot_book::owner enter(const caf::actor& who) {
    auto [o, fresh] = owners_.try_emplace(who.address(), next_owner_);
    if (fresh) {
      ++next_owner_;
      self_->monitor(who);
    }
    return o->second;
  }

  void carry_out(const slot_book::actions& act) {
    for (const auto& r : act.released) count_work(r.what, r.local, -1);
    if (act.queue_changed && stats_)
      stats_->queue_depth_set(metrics::queue_owner::budget,
                              static_cast<std::int64_t>(book_.waiting_local()));
    for (const auto& g : act.grants) {
      count_work(g.what, g.local, 1);
      if (stats_ && g.local) stats_->queue_wait(static_cast<double>(g.waited_ns) / 1e9);
      answer(g.who, slot_refusal::none, {});
    }
    for (const auto& r : act.refusals) answer(r.who, r.why, r.reason);
    for (const auto& r : act.recalls) {
      self_->send(handles_[r.link], recall_atom::value, r.on, static_cast<std::int32_t>(r.scope),
                  r.index);
    }
    // A waiter granted before its timeout makes the timer's message a no-op (the ticket is
    // gone from the book).
    if (act.queued && queue_timeout_.count() > 0 && timers_) {
      timers_->after(queue_timeout_, queue_timeout_atom::value, act.queued->first,
                     act.queued->second);
    }
  }

  void count_work(const slot_book::claim& c, bool local, int delta) {
    if (!stats_) return;
    if (local) stats_->upstream_work_add(c.upstream, delta);
    stats_->cluster_slots_set(c.upstream, book_.held_on_upstream(c.upstream));
    if (c.tokens > 0) stats_->upstream_tokens_set(c.upstream, book_.tokens_on_upstream(c.upstream));
  }

  void answer(const slot_book::holder& h, slot_refusal why, const std::string& reason) {
    auto& handle = handles_[h.who];
    if (h.id != 0) {
      self_->send(handle, lease_grant_atom::value, h.id, static_cast<std::int32_t>(why), reason);
      return;
    }
    send_grant(self_, handle, why, reason);
    if (!book_.is_lessee(h.who)) handle = nullptr;  // answered: from now on only its exit counts
  }

  caf::event_based_actor* self_;
  metrics* stats_;
  std::chrono::milliseconds queue_timeout_;
  std::optional<actor_timers> timers_;
  slot_book book_;
  rate_book rates_;
  std::map<caf::actor_addr, slot_book::owner> owners_;
  std::unordered_map<slot_book::owner, caf::actor> handles_;
  slot_book::owner next_owner_ = 1;
  health_bulletin bulletin_;
  std::map<caf::actor_addr, caf::actor> subscribers_;  // health actors, members' links
};

}  // namespace

caf::behavior budget_actor(caf::event_based_actor* self, budget_limits limits, metrics* stats,
                           net::timer_service* timers) {
  auto st = std::make_shared<budget>(self, limits, stats, timers);
  self->set_down_handler([st](caf::down_msg& dm) { st->gone(dm.source); });
  return {
      [self, st](acquire_atom, std::uint64_t upstream, std::int64_t key, std::int64_t rank,
                 std::uint64_t tokens) {
        if (auto who = caf::actor_cast<caf::actor>(self->current_sender()))
          st->acquire(who, upstream, key, rank, tokens);
      },
      [self, st](lease_atom, std::uint64_t upstream, std::int64_t key, std::int64_t rank,
                 std::uint64_t tokens, std::uint64_t lease) {
        auto link = caf::actor_cast<caf::actor>(self->current_sender());
        if (link && lease != 0) st->lease(link, lease, upstream, key, rank, tokens);
      },
      [self, st](lease_return_atom, std::uint64_t lease) {
        st->lease_return(caf::actor_cast<caf::actor_addr>(self->current_sender()), lease);
      },
      [st](queue_timeout_atom, std::int64_t rank, std::uint64_t seq) {
        st->timed_out({rank, seq});
      },
      [st](drain_now_atom) { st->refuse_local(); },
      [st](slots_atom) { return st->slots(); },
      [self, st](limits_atom, std::uint32_t global, std::vector<std::uint32_t>& per_upstream,
                 std::vector<std::uint32_t>& per_key, std::uint32_t queue_max,
                 std::int64_t queue_timeout_ms, std::vector<std::uint64_t>& tokens_per_upstream,
                 std::vector<std::uint64_t>& rpm, std::vector<std::uint64_t>& tpm,
                 std::vector<std::uint32_t>& weight) {
        // A reload of this node's config; another node's word does not change this budget.
        if (self->current_sender() && self->current_sender()->node() != self->node()) return false;
        st->set_limits({global, std::move(per_upstream), std::move(per_key), queue_max,
                        std::chrono::milliseconds(queue_timeout_ms), std::move(tokens_per_upstream),
                        std::move(rpm), std::move(tpm), std::move(weight)});
        return true;
      },
      [st](holders_atom) { return st->holders(); },
      [st](rate_atom, std::int64_t key, std::uint64_t tokens) { return st->rate(key, tokens); },
      [st](rate_fix_atom, std::int64_t key, std::int64_t second, std::uint64_t estimate,
           std::uint64_t actual) { st->rate_fix(key, second, estimate, actual); },
      [self, st](health_subscribe_atom) {
        st->subscribe(caf::actor_cast<caf::actor>(self->current_sender()));
      },
      [self, st](health_report_atom, const std::string& upstream, std::int32_t reason,
                 std::int64_t duration_ms) {
        st->report(caf::actor_cast<caf::actor_addr>(self->current_sender()), upstream, reason,
                   duration_ms);
      },
  };
}

}  // namespace tether
