#include "actors/budget_shard_actor.hpp"

#include <memory>
#include <unordered_map>

#include "actors/budget_actor.hpp"
#include "actors/messages.hpp"
#include "actors/one_way.hpp"
#include "actors/policy/admission/lease_book.hpp"

namespace tether {
namespace {

class budget_shard {
 public:
  budget_shard(caf::event_based_actor* self, caf::actor budget, metrics* stats)
      : self_(self), budget_(std::move(budget)), stats_(stats) {
    self_->monitor(budget_);
  }

  void acquire(std::uint64_t upstream, std::int64_t key, std::int64_t rank, std::uint64_t tokens) {
    auto holder = caf::actor_cast<caf::actor>(self_->current_sender());
    if (!holder) return;
    const auto id = holder.id();
    if (book_.knows(id)) return;
    self_->monitor(holder);
    holders_.emplace(id, std::move(holder));
    apply(book_.acquire(id, {upstream, key, tokens}, rank, now_ns()));
  }

  void answered(std::uint64_t lease, slot_refusal why, const std::string& reason) {
    apply(book_.answered(lease, why, reason, now_ns()));
  }

  void recalled(bool on, std::int32_t scope, std::int64_t index) {
    apply(book_.recall(on, static_cast<recall_scope>(scope), index));
  }
  void drain_now() { apply(book_.stop_taking_work("the gateway is shutting down")); }
  std::uint64_t busy() const { return book_.busy(); }

  void down(const caf::down_msg& msg) {
    if (msg.source == budget_.address()) {
      // The budget ends only with the gateway; every lease ended with it.
      self_->quit(msg.reason);
      return;
    }
    const auto id = msg.source.id();
    if (book_.knows(id)) apply(book_.holder_gone(id, now_ns()));
    holders_.erase(id);
  }

 private:
  // Carries out what the lease book decided: the connection actors' answers and the work gauge
  // first, then the budget's asks and returns.
  void apply(const lease_book::actions& act) {
    for (const auto& g : act.grants) {
      if (stats_) {
        stats_->upstream_work_add(g.pool.upstream, 1);
        stats_->queue_wait(static_cast<double>(g.waited_ns) / 1e9);
      }
      // The grant is the last thing this shard says to the holder: from now on only its exit
      // counts, and the monitor reports that.
      if (auto h = holders_.find(g.who); h != holders_.end()) {
        send_grant(self_, h->second, slot_refusal::none);
        holders_.erase(h);
      }
    }
    for (const auto& r : act.refusals) {
      if (auto h = holders_.find(r.who); h != holders_.end()) {
        send_grant(self_, h->second, r.why, r.reason);
        holders_.erase(h);
      }
    }
    if (stats_) {
      for (const auto& e : act.work_ended) stats_->upstream_work_add(e.upstream, -1);
    }
    for (const auto& a : act.asks) {
      self_->send(budget_, lease_atom::value, a.pool.upstream, a.pool.key, a.rank, a.pool.tokens,
                  a.id);
    }
    for (auto id : act.returns) self_->send(budget_, lease_return_atom::value, id);
    const auto waiting = static_cast<std::int64_t>(book_.waiting());
    if (stats_ && waiting != reported_waiting_) {
      stats_->queue_depth_add(metrics::queue_owner::shards, waiting - reported_waiting_);
      reported_waiting_ = waiting;
    }
  }

  caf::event_based_actor* self_;
  caf::actor budget_;
  metrics* stats_;
  lease_book book_;
  // Strong handles of the connection actors waiting for their answer: one nobody else references
  // would be gone (exit_reason::unreachable) before it heard. Answered, it is held by its attempt
  // alone and free to exit, which is what frees the slot.
  std::unordered_map<lease_book::holder, caf::actor> holders_;
  std::int64_t reported_waiting_ = 0;  // this shard's share of the queue depth gauge
};

}  // namespace

caf::behavior budget_shard_actor(caf::event_based_actor* self, caf::actor budget, metrics* stats) {
  auto st = std::make_shared<budget_shard>(self, std::move(budget), stats);
  self->set_down_handler([st](caf::down_msg& msg) { st->down(msg); });
  return {
      one_way([st](acquire_atom, std::uint64_t upstream, std::int64_t key, std::int64_t rank,
                   std::uint64_t tokens) { st->acquire(upstream, key, rank, tokens); }),
      one_way(
          [st](lease_grant_atom, std::uint64_t lease, std::int32_t why, const std::string& reason) {
            st->answered(lease, static_cast<slot_refusal>(why), reason);
          }),
      one_way([st](recall_atom, bool on, std::int32_t scope, std::int64_t index) {
        st->recalled(on, scope, index);
      }),
      one_way([st](drain_now_atom) { st->drain_now(); }),
      // A request (the slots count at shutdown): its answer is the handler's result.
      [st](slots_atom) { return st->busy(); },
  };
}

}  // namespace tether
