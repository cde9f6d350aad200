#include "actors/policy/admission/slot_book.hpp"

#include <algorithm>

namespace tether {
namespace {

// A lane's pass grows by full_stride / weight per grant; weights are at most in the thousands, so
// the stride keeps three significant digits of the ratio.
constexpr std::uint64_t full_stride = std::uint64_t{1} << 20;

// Brings one lessee's recalls for one kind of cap (upstreams or keys) up to date: on for each
// touched index whose cap is reached (unless the lessee holds no slot), off for each it left.
template <class Index, class Full>
void recall_at_caps(slot_book::owner link, std::uint32_t slots, const std::set<Index>& touched,
                    std::set<Index>& recalled, recall_scope scope, Full full,
                    slot_book::actions& out) {
  for (auto i : touched) {
    const bool on = full(i);
    if (on == (recalled.count(i) > 0) || (on && slots == 0)) continue;
    if (on) {
      recalled.insert(i);
    } else {
      recalled.erase(i);
    }
    out.recalls.push_back({link, on, scope, static_cast<std::int64_t>(i)});
  }
}

}  // namespace

slot_book::slot_book(caps limits) : caps_(std::move(limits)) {
  // Upstream 0 is counted even without caps: the claims beyond the list count there.
  held_upstream_.assign(
      std::max({caps_.per_upstream.size(), caps_.tokens_per_upstream.size(), std::size_t{1}}), 0);
  held_tokens_.assign(held_upstream_.size(), 0);
  queued_upstream_.assign(held_upstream_.size(), 0);
  held_key_.assign(caps_.per_key.size(), 0);
  for (std::size_t u = 0; u < held_upstream_.size(); ++u) touched_upstreams_.insert(u);
  for (std::size_t k = 0; k < held_key_.size(); ++k)
    touched_keys_.insert(static_cast<std::int64_t>(k));
}

slot_book::actions slot_book::set_caps(caps limits, std::int64_t now_ns) {
  caps_ = std::move(limits);
  const auto upstreams = std::max(caps_.per_upstream.size(), caps_.tokens_per_upstream.size());
  if (upstreams > held_upstream_.size()) {
    held_upstream_.resize(upstreams, 0);
    held_tokens_.resize(upstreams, 0);
    queued_upstream_.resize(upstreams, 0);
  }
  if (caps_.per_key.size() > held_key_.size()) held_key_.resize(caps_.per_key.size(), 0);
  for (std::size_t u = 0; u < held_upstream_.size(); ++u) touched_upstreams_.insert(u);
  for (std::size_t k = 0; k < held_key_.size(); ++k)
    touched_keys_.insert(static_cast<std::int64_t>(k));
  actions out;
  for (auto it = queue_.begin(); it != queue_.end();) {
    auto why = never_fits(it->second.what);
    if (!why) {
      ++it;
      continue;
    }
    auto w = dequeue(it++);
    out.refusals.push_back({w.who, std::move(*why), slot_refusal::too_heavy});
  }
  drain(now_ns, out);
  update_recalls(out);
  return out;
}

slot_book::claim slot_book::claim_for(std::uint64_t upstream, std::int64_t key,
                                      std::uint64_t tokens) const {
  claim c{static_cast<std::size_t>(upstream), key, tokens};
  if (c.upstream >= held_upstream_.size()) c.upstream = 0;
  return c;
}

std::uint64_t slot_book::token_cap(std::size_t upstream) const {
  return upstream < caps_.tokens_per_upstream.size() ? caps_.tokens_per_upstream[upstream] : 0;
}

bool slot_book::tokens_fit(const claim& c) const {
  const auto cap = token_cap(c.upstream);
  return cap == 0 || (c.tokens <= cap && held_tokens_[c.upstream] <= cap - c.tokens);
}

std::optional<std::string> slot_book::never_fits(const claim& c) const {
  const auto cap = token_cap(c.upstream);
  if (cap == 0 || c.tokens <= cap) return std::nullopt;
  return "a token weight of " + std::to_string(c.tokens) +
         " is more than its upstream's whole max_tokens_in_flight (" + std::to_string(cap) + ")";
}

bool slot_book::fits(const claim& c) const {
  if (held_ >= caps_.global) return false;
  if (c.upstream < caps_.per_upstream.size() &&
      held_upstream_[c.upstream] >= caps_.per_upstream[c.upstream])
    return false;
  if (c.key >= 0 && static_cast<std::size_t>(c.key) < caps_.per_key.size()) {
    auto cap = caps_.per_key[c.key];
    if (cap > 0 && held_key_[c.key] >= cap) return false;
  }
  return tokens_fit(c);
}

std::optional<slot_book::claim> slot_book::held_by(holder h) const {
  if (auto it = holders_.find(h); it != holders_.end()) return it->second.what;
  return std::nullopt;
}

std::uint32_t slot_book::held_on_upstream(std::size_t upstream) const {
  return upstream < held_upstream_.size() ? held_upstream_[upstream] : 0;
}

std::uint64_t slot_book::tokens_on_upstream(std::size_t upstream) const {
  return upstream < held_tokens_.size() ? held_tokens_[upstream] : 0;
}

std::uint32_t slot_book::held_on_key(std::int64_t key) const {
  if (key < 0 || static_cast<std::size_t>(key) >= held_key_.size()) return 0;
  return held_key_[key];
}

slot_book::lessee* slot_book::lessee_of(const holder& h) {
  if (h.id == 0) return nullptr;
  auto l = lessees_.find(h.who);
  return l == lessees_.end() ? nullptr : &l->second;
}

void slot_book::take(holder h, const claim& c, bool local) {
  touched(c);
  ++held_;
  ++held_upstream_[c.upstream];
  held_tokens_[c.upstream] += c.tokens;
  // Only a key with a cap entry is counted: nothing else reads the count.
  if (c.key >= 0 && static_cast<std::size_t>(c.key) < held_key_.size()) ++held_key_[c.key];
  holders_.emplace(h, held_slot{c, local});
  if (auto* l = lessee_of(h)) ++l->slots;
}

void slot_book::release(std::map<holder, held_slot>::iterator it, actions& out) {
  const auto& [h, slot] = *it;
  touched(slot.what);
  --held_;
  --held_upstream_[slot.what.upstream];
  held_tokens_[slot.what.upstream] -= slot.what.tokens;
  if (slot.what.key >= 0 && static_cast<std::size_t>(slot.what.key) < held_key_.size())
    --held_key_[slot.what.key];
  if (auto* l = lessee_of(h)) --l->slots;
  out.released.push_back({slot.what, slot.local});
  holders_.erase(it);
}

std::size_t slot_book::waiting_for_key(std::int64_t key) const {
  auto l = lanes_.find(key);
  return l == lanes_.end() ? 0 : l->second.waiting.size();
}

std::uint64_t slot_book::stride_of(std::int64_t key) const {
  std::uint64_t weight = 1;
  if (key >= 0 && static_cast<std::size_t>(key) < caps_.weight_per_key.size())
    weight = std::max<std::uint64_t>(caps_.weight_per_key[key], 1);
  return full_stride / weight;
}

void slot_book::enqueue(holder h, const claim& c, ticket t, bool local, std::int64_t now_ns) {
  queue_.emplace(t, waiter{h, c, local, now_ns});
  queued_by_.emplace(h, t);
  ++queued_upstream_[c.upstream];
  if (auto* l = lessee_of(h)) ++l->queued;
  if (local) ++waiting_local_;
  // A lane that was empty joins the round where it stands now: an idle key banks no turns, and a
  // key served ahead of the round keeps its lead.
  auto& lane = lanes_[c.key];
  if (lane.waiting.empty()) {
    lane.pass = std::max(lane.pass, round_pass_);
    lane.joined = t.second;
  }
  lane.waiting.insert(t);
}

slot_book::waiter slot_book::dequeue(std::map<ticket, waiter>::iterator it) {
  auto w = it->second;
  lanes_[w.what.key].waiting.erase(it->first);
  queued_by_.erase(w.who);
  queue_.erase(it);
  --queued_upstream_[w.what.upstream];
  if (auto* l = lessee_of(w.who)) --l->queued;
  if (w.local) --waiting_local_;
  return w;
}

slot_book::actions slot_book::acquire(owner who, std::uint64_t upstream, std::int64_t key,
                                      std::int64_t rank, std::uint64_t tokens, bool local,
                                      std::int64_t now_ns) {
  holder h{who, 0};
  if (knows(h)) return {};
  return admit(h, claim_for(upstream, key, tokens), rank, local, now_ns);
}

slot_book::actions slot_book::lease(owner link, lease_id id, std::uint64_t upstream,
                                    std::int64_t key, std::int64_t rank, std::uint64_t tokens,
                                    std::int64_t now_ns) {
  holder h{link, id};
  if (id == 0 || knows(h)) return {};
  lessees_.try_emplace(link);
  return admit(h, claim_for(upstream, key, tokens), rank, false, now_ns);
}

slot_book::actions slot_book::admit(holder h, claim c, std::int64_t rank, bool local,
                                    std::int64_t now_ns) {
  actions out;
  if (local && refusing_local_) {
    out.refusals.push_back({h, *refusing_local_, slot_refusal::stopping});
    return out;
  }
  if (auto why = never_fits(c)) {
    out.refusals.push_back({h, std::move(*why), slot_refusal::too_heavy});
    return out;
  }
  // Fitting now means no waiter could take the same slots: every release hands capacity to the
  // waiters that fit (drain). Tokens are the exception: a light claim fits
  // where an older heavy one waits, so on a token-capped upstream with waiters it takes its
  // place in the queue and the drain decides, in order.
  const bool behind_others = token_cap(c.upstream) > 0 && queued_upstream_[c.upstream] > 0;
  if (fits(c) && !behind_others) {
    take(h, c, local);
    out.grants.push_back({h, c, local, 0});
  } else if (queue_.size() >= caps_.queue_max) {
    out.refusals.push_back({h, "admission queue is full"});
  } else {
    ticket t{rank, next_seq_++};
    enqueue(h, c, t, local, now_ns);
    out.queue_changed = true;
    if (fits(c)) drain(now_ns, out);
    if (queued_by_.count(h) > 0) out.queued = t;
  }
  update_recalls(out);
  return out;
}

void slot_book::drain(std::int64_t now_ns, actions& out) {
  while (held_ < caps_.global) {
    auto t = next_to_serve();
    if (!t) break;
    auto it = queue_.find(*t);
    auto& lane = lanes_[it->second.what.key];
    round_pass_ = std::max(round_pass_, lane.pass);
    lane.pass += stride_of(it->second.what.key);
    auto w = dequeue(it);
    take(w.who, w.what, w.local);
    out.grants.push_back({w.who, w.what, w.local, now_ns - w.since_ns});
  }
  out.queue_changed = true;
}

std::optional<slot_book::ticket> slot_book::next_to_serve() const {
  if (queue_.empty()) return std::nullopt;  // every release asks: the usual answer, at no cost
  // The lanes in the round's order: least pass first, then the one waiting longest.
  std::vector<std::pair<std::pair<std::uint64_t, std::uint64_t>, const lane*>> order;
  for (const auto& [key, l] : lanes_) {
    if (!l.waiting.empty()) order.push_back({{l.pass, l.joined}, &l});
  }
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  // A waiter that does not fit (its upstream or key is still full) does not hold back the next
  // one that does, except for tokens: a heavy waiter would starve behind a stream of light ones,
  // so the first one, in the round's order, that does not fit its upstream's tokens holds back
  // every later waiter there.
  std::vector<bool> held_back(held_upstream_.size(), false);
  for (const auto& [place, l] : order) {
    for (const auto& t : l->waiting) {
      const auto& what = queue_.at(t).what;
      if (held_back[what.upstream]) continue;
      if (fits(what)) return t;
      if (!tokens_fit(what)) held_back[what.upstream] = true;
    }
  }
  return std::nullopt;
}

slot_book::actions slot_book::give_back(holder h, std::int64_t now_ns) {
  actions out;
  if (auto it = holders_.find(h); it != holders_.end()) {
    release(it, out);
    drain(now_ns, out);
  } else if (auto q = queued_by_.find(h); q != queued_by_.end()) {
    dequeue(queue_.find(q->second));
    out.queue_changed = true;
  }
  update_recalls(out);
  return out;
}

slot_book::actions slot_book::timed_out(ticket t) {
  actions out;
  auto it = queue_.find(t);
  if (it == queue_.end()) return out;
  auto w = dequeue(it);
  out.queue_changed = true;
  out.refusals.push_back({w.who, "waited longer than budget.queue_timeout_ms for a slot"});
  update_recalls(out);
  return out;
}

slot_book::actions slot_book::refuse_local(std::string reason) {
  actions out;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (!it->second.local) {
      ++it;
      continue;
    }
    auto w = dequeue(it++);
    out.refusals.push_back({w.who, reason, slot_refusal::stopping});
  }
  refusing_local_ = std::move(reason);
  out.queue_changed = true;
  update_recalls(out);
  return out;
}

slot_book::actions slot_book::owner_gone(owner who, std::int64_t now_ns) {
  actions out;
  bool freed = false;
  for (auto h = holders_.lower_bound({who, 0}); h != holders_.end() && h->first.who == who;) {
    release(h++, out);
    freed = true;
  }
  for (auto q = queued_by_.lower_bound({who, 0}); q != queued_by_.end() && q->first.who == who;) {
    auto it = queue_.find(q->second);
    ++q;
    dequeue(it);
  }
  lessees_.erase(who);
  if (freed) drain(now_ns, out);
  out.queue_changed = true;
  update_recalls(out);
  return out;
}

bool slot_book::upstream_full(std::size_t upstream) const {
  return upstream < caps_.per_upstream.size() && upstream < held_upstream_.size() &&
         held_upstream_[upstream] >= caps_.per_upstream[upstream];
}

bool slot_book::key_full(std::int64_t key) const {
  if (key < 0) return false;
  const auto k = static_cast<std::size_t>(key);
  return k < caps_.per_key.size() && k < held_key_.size() && caps_.per_key[k] > 0 &&
         held_key_[k] >= caps_.per_key[k];
}

void slot_book::touched(const claim& c) {
  touched_upstreams_.insert(c.upstream);
  if (c.key >= 0) touched_keys_.insert(c.key);
}

void slot_book::update_recalls(actions& out) {
  // At a cap, whoever asks next cannot be served and may not even be let wait (a full queue, a
  // queue_max of 0), so no slot under that cap may sit idle; past a cap a reload lowered, a kept
  // slot reused would start work beyond it. So each lessee is recalled for the upstreams and keys
  // at their cap, and for everything at the global cap or while someone else waits here.
  const bool global_full = held_ >= caps_.global;
  for (auto& [link, l] : lessees_) {
    // A link that holds no slot has nothing to give back, so it is not told it is recalled.
    const bool want = global_full || queue_.size() > l.queued;
    if (want != l.recalled && !(want && l.slots == 0)) {
      l.recalled = want;
      out.recalls.push_back({link, want, recall_scope::all, -1});
    }
    recall_at_caps(
        link, l.slots, touched_upstreams_, l.upstreams_recalled, recall_scope::upstream,
        [this](std::size_t u) { return upstream_full(u); }, out);
    recall_at_caps(
        link, l.slots, touched_keys_, l.keys_recalled, recall_scope::key,
        [this](std::int64_t k) { return key_full(k); }, out);
  }
  touched_upstreams_.clear();
  touched_keys_.clear();
}

}  // namespace tether
