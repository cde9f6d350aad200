#include "actors/policy/admission/lease_book.hpp"

#include <algorithm>
#include <iterator>

namespace tether {

lease_book::actions lease_book::acquire(holder who, pool_key k, std::int64_t rank,
                                        std::int64_t now_ns) {
  actions out;
  if (knows(who)) return out;
  if (stopped_) {
    out.refusals.push_back({who, stop_reason_, slot_refusal::stopping});
    return out;
  }
  auto& p = pools_[k];
  if (!p.idle.empty()) {
    auto slot = p.idle.back();
    p.idle.pop_back();
    busy_.emplace(who, busy_slot{k, slot.id, rank});
    out.grants.push_back({who, 0, k});
    return out;
  }
  queue_key q{rank, next_seq_++};
  p.waiting.emplace(q, waiter{who, now_ns});
  waiting_by_.emplace(who, std::make_pair(k, q));
  // The slots idle in other pools are of no use to this waiter, and at the host they may be what
  // keeps its ask waiting (the host recalls for others' waiters, never for this book's own).
  give_back_idle(out);
  // One ask per waiter: whichever answer comes first serves the oldest waiter.
  while (p.asks.size() < p.waiting.size()) {
    auto id = next_lease_++;
    p.asks.insert({rank, id});
    ask_pool_.emplace(id, std::make_pair(k, rank));
    out.asks.push_back({id, k, rank});
  }
  return out;
}

void lease_book::hand_over(pool& p, const pool_key& k, lease id, std::int64_t now_ns,
                           actions& out) {
  auto first = p.waiting.begin();
  auto w = first->second;
  auto rank = first->first.first;
  p.waiting.erase(first);
  waiting_by_.erase(w.who);
  busy_.emplace(w.who, busy_slot{k, id, rank});
  out.grants.push_back({w.who, now_ns - w.since_ns, k});
}

void lease_book::free_slot(pool& p, const pool_key& k, lease id, std::int64_t now_ns,
                           actions& out) {
  if (recalled(k)) {
    // Someone elsewhere waits, or a cap this slot counts against is reached: the host's queue, not
    // this node, decides who is next — a local waiter still has its own ask queued there.
    out.returns.push_back(id);
  } else if (!p.waiting.empty() && p.waiting.size() == waiting_by_.size()) {
    hand_over(p, k, id, now_ns, out);
  } else if (keeps_idle(k)) {
    p.idle.push_back({id, now_ns});
  } else {
    // Waiters of other pools (other keys, other upstreams) wait here too: which of them goes next
    // is the host's fair queue's to decide, not this book's.
    out.returns.push_back(id);
  }
}

bool lease_book::keeps_idle(const pool_key& k) const {
  // A waiter here (of another pool) may need the host's room this slot takes; a token-weighted
  // slot would serve only a claim of the very same weight, and idle it keeps the upstream's token
  // cap from everyone else.
  return keep_idle_ && !recalled(k) && waiting_by_.empty() && k.tokens == 0;
}

bool lease_book::recalled(const pool_key& k) const {
  return recalled_ || recalled_upstreams_.count(k.upstream) > 0 ||
         (k.key >= 0 && recalled_keys_.count(k.key) > 0);
}

void lease_book::give_back_idle(actions& out) {
  for (auto& [k, p] : pools_) {
    for (const auto& slot : p.idle) out.returns.push_back(slot.id);
    p.idle.clear();
  }
}

void lease_book::trim_asks(pool& p, actions& out) {
  // An ask nobody waits for any more is withdrawn: the one with the worst place in the host's
  // queue (latest rank, then newest), so the asks left keep the places the oldest waiters
  // earned (a retry carries its request's early rank).
  while (p.asks.size() > p.waiting.size()) {
    auto worst = *p.asks.rbegin();
    p.asks.erase(worst);
    ask_pool_.erase(worst.second);
    out.returns.push_back(worst.second);
  }
}

lease_book::actions lease_book::answered(lease id, slot_refusal why, const std::string& reason,
                                         std::int64_t now_ns) {
  actions out;
  const bool granted = why == slot_refusal::none;
  auto a = ask_pool_.find(id);
  if (a == ask_pool_.end()) return out;
  auto [k, rank] = a->second;
  ask_pool_.erase(a);
  auto& p = pools_[k];
  auto ask = p.asks.find({rank, id});
  const auto place = static_cast<std::size_t>(std::distance(p.asks.begin(), ask));
  p.asks.erase(ask);
  if (!granted) {
    // The host's queue is full (its newest ask is refused) or its wait limit passed (its oldest):
    // asks and waiters pair up in order, so the waiter in the refused ask's place gets the answer
    // and the others keep theirs.
    if (!p.waiting.empty()) {
      auto w = std::next(p.waiting.begin(),
                         static_cast<std::ptrdiff_t>(std::min(place, p.waiting.size() - 1)));
      out.refusals.push_back({w->second.who, reason, why});
      waiting_by_.erase(w->second.who);
      p.waiting.erase(w);
    }
  } else if (!p.waiting.empty()) {
    hand_over(p, k, id, now_ns, out);  // granted by the host's order: served even when recalled
  } else if (keeps_idle(k)) {
    p.idle.push_back({id, now_ns});
  } else {
    out.returns.push_back(id);
  }
  trim_asks(p, out);
  return out;
}

lease_book::actions lease_book::holder_gone(holder who, std::int64_t now_ns) {
  actions out;
  if (auto b = busy_.find(who); b != busy_.end()) {
    auto slot = b->second;
    busy_.erase(b);
    out.work_ended.push_back(slot.pool);
    auto& p = pools_[slot.pool];
    free_slot(p, slot.pool, slot.id, now_ns, out);
    trim_asks(p, out);
    return out;
  }
  if (auto w = waiting_by_.find(who); w != waiting_by_.end()) {
    auto [k, q] = w->second;
    waiting_by_.erase(w);
    auto& p = pools_[k];
    p.waiting.erase(q);
    trim_asks(p, out);
  }
  return out;
}

lease_book::actions lease_book::recall(bool on, recall_scope scope, std::int64_t index) {
  actions out;
  switch (scope) {
    case recall_scope::all:
      recalled_ = on;
      break;
    case recall_scope::upstream:
      if (index < 0) return out;
      if (on) {
        recalled_upstreams_.insert(static_cast<std::uint64_t>(index));
      } else {
        recalled_upstreams_.erase(static_cast<std::uint64_t>(index));
      }
      break;
    case recall_scope::key:
      if (on) {
        recalled_keys_.insert(index);
      } else {
        recalled_keys_.erase(index);
      }
      break;
  }
  if (!on) return out;
  for (auto& [k, p] : pools_) {
    if (!recalled(k)) continue;
    for (const auto& slot : p.idle) out.returns.push_back(slot.id);
    p.idle.clear();
  }
  return out;
}

lease_book::actions lease_book::expire_idle(std::int64_t now_ns, std::int64_t idle_ns) {
  actions out;
  for (auto& [k, p] : pools_) {
    auto keep = std::stable_partition(p.idle.begin(), p.idle.end(), [&](const idle_slot& s) {
      return now_ns - s.since_ns < idle_ns;
    });
    for (auto it = keep; it != p.idle.end(); ++it) out.returns.push_back(it->id);
    p.idle.erase(keep, p.idle.end());
  }
  return out;
}

lease_book::handover lease_book::drop_all() {
  handover h;
  for (const auto& [who, slot] : busy_) h.busy.push_back({who, slot.pool, slot.rank});
  for (const auto& [k, p] : pools_) {
    for (const auto& [q, w] : p.waiting) h.waiting.push_back({w.who, k, q.first});
  }
  pools_.clear();
  busy_.clear();
  waiting_by_.clear();
  ask_pool_.clear();
  recalled_ = false;
  recalled_upstreams_.clear();
  recalled_keys_.clear();
  return h;
}

lease_book::actions lease_book::stop_taking_work(const std::string& reason) {
  actions out;
  stopped_ = true;
  stop_reason_ = reason;
  keep_idle_ = false;
  for (auto& [k, p] : pools_) {
    for (const auto& [q, w] : p.waiting) {
      out.refusals.push_back({w.who, reason, slot_refusal::stopping});
      waiting_by_.erase(w.who);
    }
    p.waiting.clear();
    trim_asks(p, out);
  }
  give_back_idle(out);
  return out;
}

std::size_t lease_book::idle() const {
  std::size_t n = 0;
  for (const auto& [k, p] : pools_) n += p.idle.size();
  return n;
}

bool lease_book::oldest_idle(std::int64_t& since_ns) const {
  bool any = false;
  for (const auto& [k, p] : pools_) {
    for (const auto& s : p.idle) {
      if (!any || s.since_ns < since_ns) since_ns = s.since_ns;
      any = true;
    }
  }
  return any;
}

}  // namespace tether
