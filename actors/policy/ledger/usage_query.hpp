// What a reading of the ledger asks for (contract: "The ledger": `GET /v1/usage`, `tether usage`)
// and the rows it answers. Plain data shared by the store that answers it (actors/ledger_store),
// the parser of the HTTP query and the renderers (usage_report).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "actors/policy/ledger/usage_record.hpp"

namespace tether::ledger {

enum class group_by { hour, day, model };

// A row counts when its hour starts in [from, to): the store's resolution is the hour.
struct usage_query {
  std::optional<std::string> key{};
  std::optional<std::string> model{};
  std::int64_t from = std::numeric_limits<std::int64_t>::min();
  std::int64_t to = std::numeric_limits<std::int64_t>::max();
  group_by by = group_by::day;
  bool operator==(const usage_query&) const = default;
};

struct usage_row {
  // The hour's or day's start (unix seconds); grouped by model, the first hour with usage.
  std::int64_t start = 0;
  std::string key;
  std::string model;
  usage_totals totals;
  bool operator==(const usage_row&) const = default;
};

}  // namespace tether::ledger
