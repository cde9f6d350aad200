// Where request actors leave their usage records for the ledger actor (actors/ledger_actor.hpp)
// without a message each: a few shards, each a map of key × model × upstream to the totals added
// since the ledger last took them, under a lock of its own that only the threads mapped to it and
// the ledger (once per flush interval) take. A message per request to one actor on a thread of
// its own cost more than the rest of the ledger together; a request whose key has budgets still
// sends its record, as the ledger must take its admitted estimate back at once.
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/policy/ledger/usage_record.hpp"

namespace tether::ledger {

struct tally_row {
  std::string key;
  std::string model;
  std::string upstream;
  usage_totals totals;
};

class ledger_tally {
 public:
  explicit ledger_tally(std::size_t shards = 8);

  void add(const std::string& key, const std::string& model, const std::string& upstream,
           const usage_record& r);
  // Everything added since the last take; the tally starts empty.
  std::vector<tally_row> take();

 private:
  struct row_key {
    std::string key;
    std::string model;
    std::string upstream;
    bool operator==(const row_key&) const = default;
  };
  struct row_key_hash {
    std::size_t operator()(const row_key& k) const;
  };
  struct shard {
    std::mutex lock;
    std::unordered_map<row_key, usage_totals, row_key_hash> rows;
  };
  std::vector<shard> shards_;
};

}  // namespace tether::ledger
