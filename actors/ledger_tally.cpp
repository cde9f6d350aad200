#include "actors/ledger_tally.hpp"

#include <atomic>
#include <functional>

namespace tether::ledger {

namespace {

// Each thread keeps to one shard, assigned in turn as threads first add: the io threads, which
// are few and long-lived, each get one of their own when there are enough.
std::size_t shard_of_this_thread(std::size_t shards) {
  static std::atomic<std::size_t> next{0};
  thread_local const std::size_t mine = next.fetch_add(1, std::memory_order_relaxed);
  return mine % shards;
}

}  // namespace

std::size_t ledger_tally::row_key_hash::operator()(const row_key& k) const {
  const std::hash<std::string> h;
  std::size_t seed = h(k.key);
  seed ^= h(k.model) + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2);
  seed ^= h(k.upstream) + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2);
  return seed;
}

ledger_tally::ledger_tally(std::size_t shards) : shards_(shards == 0 ? 1 : shards) {}

void ledger_tally::add(const std::string& key, const std::string& model,
                       const std::string& upstream, const usage_record& r) {
  auto& s = shards_[shard_of_this_thread(shards_.size())];
  const std::lock_guard guard{s.lock};
  s.rows[row_key{key, model, upstream}].add(r);
}

std::vector<tally_row> ledger_tally::take() {
  std::vector<tally_row> out;
  for (auto& s : shards_) {
    std::unordered_map<row_key, usage_totals, row_key_hash> rows;
    {
      const std::lock_guard guard{s.lock};
      rows.swap(s.rows);
    }
    for (auto& [k, totals] : rows) out.push_back({k.key, k.model, k.upstream, totals});
  }
  return out;
}

}  // namespace tether::ledger
