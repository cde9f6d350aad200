// A key's budgets (contract: "The ledger": max_tokens_per_day, max_tokens_per_month,
// max_spend_per_day, max_spend_per_month, UTC periods) and the check at admission. A key is past
// a budget when what the period counts — its settled usage (stored and not yet flushed) plus the
// estimates of its requests still in flight — has reached the limit. The request being admitted
// is not part of the sum: it joins the in-flight estimates once admitted, so concurrent requests
// cannot all slip under one remaining token, and a budget is overrun by at most the requests
// that were admitted before it ran out. Pure: usage and the time come in.
#pragma once

#include <cstdint>
#include <limits>
#include <string_view>

#include "actors/policy/ledger/utc_period.hpp"
#include "config/config.hpp"

namespace tether::ledger {

struct budget_limits {
  // 0 = no such budget.
  std::uint64_t tokens_per_day = 0;
  std::uint64_t tokens_per_month = 0;
  std::uint64_t spend_nanousd_per_day = 0;
  std::uint64_t spend_nanousd_per_month = 0;
  bool any() const {
    return tokens_per_day || tokens_per_month || spend_nanousd_per_day || spend_nanousd_per_month;
  }
  bool operator==(const budget_limits&) const = default;
};

// Usage sums stop at the largest count rather than wrap: a key past it stays past every budget.
inline std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
  return b > std::numeric_limits<std::uint64_t>::max() - a
             ? std::numeric_limits<std::uint64_t>::max()
             : a + b;
}

// A key's budgets as its [[keys]] entry writes them (spend in USD → nanousd).
budget_limits limits_of(const config::key_config& key);

struct period_usage {
  std::uint64_t tokens = 0;  // usage_totals::billed_tokens
  std::uint64_t spend_nanousd = 0;
};

enum class budget_limit { none, tokens_per_day, tokens_per_month, spend_per_day, spend_per_month };
// The setting's name, for the refusal's message and the access log.
std::string_view name_of(budget_limit l);

struct budget_verdict {
  bool admitted = true;
  // Refused: the budget that stays exhausted longest (a month's outlasts a day's) and the
  // seconds to its period's end (≥ 1), when it admits again if nothing else is in flight.
  budget_limit limit = budget_limit::none;
  std::int64_t retry_after_s = 0;
  // Whether that budget's settled usage alone reached it; false: only the in-flight estimates
  // did, which the requests' ends correct, so an earlier retry may be admitted.
  bool settled = false;
};

budget_verdict check_budget(const budget_limits& limits, const period_usage& settled_day,
                            const period_usage& settled_month, const period_usage& in_flight,
                            std::int64_t now_unix_s);

}  // namespace tether::ledger
