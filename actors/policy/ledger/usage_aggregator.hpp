// Usage records merged into the ledger's rows between two flushes (contract: "The ledger":
// flushed in batches, never on a request's path). However many requests a key makes in an hour,
// a flush writes one row per key × model × upstream × hour, so the store's work follows the
// number of distinct rows, not the request rate. Pure: the time a record ended comes in with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/policy/ledger/aggregate_key.hpp"
#include "actors/policy/ledger/usage_record.hpp"

namespace tether::ledger {

struct aggregate_row {
  aggregate_key key;
  usage_totals totals;
  bool operator==(const aggregate_row&) const = default;
};

// A flush's rows; `sequence` numbers the batches an aggregator handed out (1, 2, …), so a
// receiver can tell a batch it already applied.
struct usage_batch {
  std::uint64_t sequence = 0;
  std::vector<aggregate_row> rows;
};

class usage_aggregator {
 public:
  void add(const std::string& key, const std::string& model, const std::string& upstream,
           std::int64_t ended_unix_s, const usage_record& record);
  void add(const std::string& key, const std::string& model, const std::string& upstream,
           std::int64_t ended_unix_s, const usage_totals& totals);

  bool empty() const { return rows_.empty(); }
  std::size_t rows() const { return rows_.size(); }
  // What the records since the last batch add to `key` in [from, to): with the stored totals,
  // a budget's count before the flush.
  usage_totals unflushed(const std::string& key, std::int64_t from, std::int64_t to) const;
  // The rows since the last batch whose hour starts in [from, to).
  std::vector<aggregate_row> rows_in(std::int64_t from, std::int64_t to) const;

  // Everything merged since the last batch, in no particular order; the aggregator starts empty.
  usage_batch take_batch();

 private:
  std::unordered_map<aggregate_key, usage_totals, aggregate_key_hash> rows_;
  std::uint64_t sequence_ = 0;
};

}  // namespace tether::ledger
