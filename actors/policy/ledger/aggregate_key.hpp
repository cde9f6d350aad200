// The ledger's row (contract: "The ledger": aggregated per key × model × upstream × hour): what
// the store adds a request's usage to. `key` is the gateway key's name (empty without keys),
// `model` the public model name the caller asked for, `hour` the UTC hour the request ended in.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace tether::ledger {

struct aggregate_key {
  std::string key;
  std::string model;
  std::string upstream;
  std::int64_t hour = 0;  // unix seconds, a multiple of 3600
  bool operator==(const aggregate_key&) const = default;
};

struct aggregate_key_hash {
  std::size_t operator()(const aggregate_key& k) const;
};

}  // namespace tether::ledger
