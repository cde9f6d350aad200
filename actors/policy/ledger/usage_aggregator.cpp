#include "actors/policy/ledger/usage_aggregator.hpp"

#include <utility>

#include "actors/policy/ledger/utc_period.hpp"

namespace tether::ledger {

void usage_aggregator::add(const std::string& key, const std::string& model,
                           const std::string& upstream, std::int64_t ended_unix_s,
                           const usage_record& record) {
  rows_[aggregate_key{key, model, upstream, hour_start(ended_unix_s)}].add(record);
}

void usage_aggregator::add(const std::string& key, const std::string& model,
                           const std::string& upstream, std::int64_t ended_unix_s,
                           const usage_totals& totals) {
  rows_[aggregate_key{key, model, upstream, hour_start(ended_unix_s)}].add(totals);
}

usage_totals usage_aggregator::unflushed(const std::string& key, std::int64_t from,
                                         std::int64_t to) const {
  usage_totals sum;
  for (const auto& [k, totals] : rows_) {
    if (k.key == key && k.hour >= from && k.hour < to) sum.add(totals);
  }
  return sum;
}

std::vector<aggregate_row> usage_aggregator::rows_in(std::int64_t from, std::int64_t to) const {
  std::vector<aggregate_row> rows;
  for (const auto& [k, totals] : rows_) {
    if (k.hour >= from && k.hour < to) rows.push_back({k, totals});
  }
  return rows;
}

usage_batch usage_aggregator::take_batch() {
  usage_batch batch;
  batch.sequence = ++sequence_;
  batch.rows.reserve(rows_.size());
  for (auto& [k, totals] : rows_) batch.rows.push_back({k, totals});
  rows_.clear();
  return batch;
}

}  // namespace tether::ledger
