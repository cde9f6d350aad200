#include "actors/policy/ledger/ledger_book.hpp"

#include <limits>
#include <utility>

namespace tether::ledger {

namespace {

std::uint64_t saturating_sub(std::uint64_t a, std::uint64_t b) {
  return b > a ? 0 : a - b;
}

void add_to(period_usage& u, const usage_totals& t) {
  u.tokens = saturating_add(u.tokens, t.billed_tokens());
  u.spend_nanousd = saturating_add(u.spend_nanousd, t.spend_nanousd);
}

}  // namespace

ledger_book::ledger_book(stored_totals stored) : stored_(std::move(stored)) {}

// A period is read from the store once, when it begins (or on first use): from then on each
// record adds to it here, so an admission costs no read.
ledger_book::period_cache& ledger_book::current(period p, std::int64_t now_unix_s) {
  auto& c = p == period::day ? day_ : month_;
  if (c.loaded && now_unix_s >= c.span.start && now_unix_s < c.span.end) return c;
  const auto span = span_of(p, now_unix_s);
  std::unordered_map<std::string, period_usage> fresh;
  for (const auto& [key, totals] : stored_(span.start, span.end)) add_to(fresh[key], totals);
  c.span = span;
  c.by_key = std::move(fresh);
  c.loaded = true;
  add_unwritten(c);
  return c;
}

// The rows the store does not have yet count too: a budget must not reopen because its
// period began between a record and its flush.
void ledger_book::add_unwritten(period_cache& c) const {
  const auto add_rows = [&c](const std::vector<aggregate_row>& rows) {
    for (const auto& row : rows) {
      if (row.key.hour >= c.span.start && row.key.hour < c.span.end)
        add_to(c.by_key[row.key.key], row.totals);
    }
  };
  for (const auto& b : batches_) add_rows(b.rows);
  add_rows(aggregator_.rows_in(c.span.start, c.span.end));
}

budget_verdict ledger_book::admit(const std::string& key, const budget_limits& limits,
                                  const period_usage& estimate, std::int64_t now_unix_s) {
  const auto day = settled(key, period::day, now_unix_s);
  const auto month = settled(key, period::month, now_unix_s);
  const auto flying = in_flight(key);
  auto verdict = check_budget(limits, day, month, flying, now_unix_s);
  if (verdict.admitted) {
    auto& f = in_flight_[key];
    f.tokens = saturating_add(f.tokens, estimate.tokens);
    f.spend_nanousd = saturating_add(f.spend_nanousd, estimate.spend_nanousd);
  }
  return verdict;
}

void ledger_book::record(const ledger_entry& e, std::int64_t now_unix_s) {
  if (e.admitted.tokens > 0 || e.admitted.spend_nanousd > 0) {
    if (auto it = in_flight_.find(e.key); it != in_flight_.end()) {
      it->second.tokens = saturating_sub(it->second.tokens, e.admitted.tokens);
      it->second.spend_nanousd = saturating_sub(it->second.spend_nanousd, e.admitted.spend_nanousd);
      if (it->second.tokens == 0 && it->second.spend_nanousd == 0) in_flight_.erase(it);
    }
  }
  if (!e.worked) return;
  usage_totals one;
  one.add(e.usage);
  add(e.key, e.model, e.upstream, one, now_unix_s);
}

void ledger_book::add(const std::string& key, const std::string& model, const std::string& upstream,
                      const usage_totals& totals, std::int64_t now_unix_s) {
  // The periods are brought to `now` before the totals are aggregated, so that a period read
  // from the store now does not count them twice.
  auto& day = current(period::day, now_unix_s);
  auto& month = current(period::month, now_unix_s);
  add_to(day.by_key[key], totals);
  add_to(month.by_key[key], totals);
  aggregator_.add(key, model, upstream, now_unix_s, totals);
}

period_usage ledger_book::settled(const std::string& key, period p, std::int64_t now_unix_s) {
  const auto& c = current(p, now_unix_s);
  const auto it = c.by_key.find(key);
  return it == c.by_key.end() ? period_usage{} : it->second;
}

std::vector<std::string> ledger_book::keys(std::int64_t now_unix_s) {
  std::vector<std::string> out;
  for (const auto& [key, usage] : current(period::month, now_unix_s).by_key) out.push_back(key);
  return out;
}

period_usage ledger_book::in_flight(const std::string& key) const {
  const auto it = in_flight_.find(key);
  return it == in_flight_.end() ? period_usage{} : it->second;
}

const usage_batch* ledger_book::next_batch() {
  if (batches_.empty()) {
    if (aggregator_.empty()) return nullptr;
    batches_.push_back(aggregator_.take_batch());
  }
  return &batches_.front();
}

void ledger_book::written() {
  if (!batches_.empty()) batches_.pop_front();
}

std::size_t ledger_book::unwritten_rows() const {
  std::size_t n = aggregator_.rows();
  for (const auto& b : batches_) n += b.rows.size();
  return n;
}

}  // namespace tether::ledger
