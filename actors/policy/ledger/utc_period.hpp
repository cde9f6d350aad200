// The UTC periods budgets count in (contract: "The ledger": per day and per month, UTC), and the
// hour the ledger aggregates by. Times are unix seconds; a period is [start, end). Calendar
// arithmetic, so a month is 28 to 31 days and February has 29 in leap years.
#pragma once

#include <cstdint>

namespace tether::ledger {

enum class period { day, month };

struct period_span {
  std::int64_t start = 0;  // unix seconds, inclusive
  std::int64_t end = 0;    // unix seconds, exclusive
  bool operator==(const period_span&) const = default;
};

std::int64_t hour_start(std::int64_t unix_s);
period_span span_of(period p, std::int64_t unix_s);
// Seconds from `unix_s` to the end of its period (≥ 1): a Retry-After that admits again once the
// period rolled over.
std::int64_t seconds_to_end(period p, std::int64_t unix_s);

}  // namespace tether::ledger
