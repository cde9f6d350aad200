// The ledger actor's arithmetic (contract: "The ledger"), without the actor: records come in and
// leave as batches for the store; for each key it keeps what the current UTC day and month have
// settled (stored, or waiting for a flush) and what its admitted requests still in flight were
// estimated at, and answers the check at admission from them. Pure: the time comes in with each
// call, and what the store holds for a period is read through a function.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/policy/ledger/budget_check.hpp"
#include "actors/policy/ledger/usage_aggregator.hpp"
#include "actors/policy/ledger/usage_record.hpp"
#include "actors/policy/ledger/utc_period.hpp"

namespace tether::ledger {

// One request's end, as the ledger receives it. `admitted` is the estimate it was admitted with
// when its key has budgets (zero otherwise): it leaves the key's in-flight sum. A request no
// upstream worked on (`worked` false) only gives its estimate back.
struct ledger_entry {
  std::string key;
  std::string model;
  std::string upstream;
  usage_record usage;
  period_usage admitted;
  bool worked = true;
};

class ledger_book {
 public:
  // What the store holds per key for the hours in [from, to); may throw (the store's errors).
  using stored_totals =
      std::function<std::map<std::string, usage_totals>(std::int64_t from, std::int64_t to)>;

  explicit ledger_book(stored_totals stored);

  // Whether `key` may start a request estimated at `estimate`; admitted, the estimate joins the
  // key's in-flight sum until its entry comes.
  budget_verdict admit(const std::string& key, const budget_limits& limits,
                       const period_usage& estimate, std::int64_t now_unix_s);

  void record(const ledger_entry& e, std::int64_t now_unix_s);
  // Totals of many requests of one key × model × upstream that ended by `now` (the requests
  // without budgets, tallied where they ended and handed over at each flush).
  void add(const std::string& key, const std::string& model, const std::string& upstream,
           const usage_totals& totals, std::int64_t now_unix_s);

  // What `key` has settled in the period `now` is in, and what it has in flight.
  period_usage settled(const std::string& key, period p, std::int64_t now_unix_s);
  period_usage in_flight(const std::string& key) const;
  // The keys with usage in the month `now` is in.
  std::vector<std::string> keys(std::int64_t now_unix_s);

  // The batch to write next: the oldest one not yet written, else the records since the last
  // batch (null when there are none). It stays the next one until written() says it is stored,
  // so a write that failed is tried again with the same rows, never merged into a later batch.
  const usage_batch* next_batch();
  void written();
  // Rows waiting for the store: in batches handed out and in the records since.
  std::size_t unwritten_rows() const;

 private:
  struct period_cache {
    period_span span{};
    bool loaded = false;
    std::unordered_map<std::string, period_usage> by_key;
  };
  period_cache& current(period p, std::int64_t now_unix_s);
  void add_unwritten(period_cache& c) const;

  stored_totals stored_;
  usage_aggregator aggregator_;
  std::deque<usage_batch> batches_;
  period_cache day_;
  period_cache month_;
  std::unordered_map<std::string, period_usage> in_flight_;
};

}  // namespace tether::ledger
