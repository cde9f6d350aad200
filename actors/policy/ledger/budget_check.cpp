#include "actors/policy/ledger/budget_check.hpp"

#include "actors/policy/ledger/model_price.hpp"

namespace tether::ledger {

budget_limits limits_of(const config::key_config& key) {
  return {key.max_tokens_per_day, key.max_tokens_per_month, usd_to_nanousd(key.max_spend_per_day),
          usd_to_nanousd(key.max_spend_per_month)};
}

std::string_view name_of(budget_limit l) {
  switch (l) {
    case budget_limit::none:
      return "";
    case budget_limit::tokens_per_day:
      return "max_tokens_per_day";
    case budget_limit::tokens_per_month:
      return "max_tokens_per_month";
    case budget_limit::spend_per_day:
      return "max_spend_per_day";
    case budget_limit::spend_per_month:
      return "max_spend_per_month";
  }
  return "";
}

budget_verdict check_budget(const budget_limits& limits, const period_usage& settled_day,
                            const period_usage& settled_month, const period_usage& in_flight,
                            std::int64_t now_unix_s) {
  budget_verdict v;
  const auto consider = [&](budget_limit which, period p, std::uint64_t limit,
                            std::uint64_t settled, std::uint64_t flying) {
    if (limit == 0 || saturating_add(settled, flying) < limit) return;
    const auto wait = seconds_to_end(p, now_unix_s);
    // The longest wait wins; at a tie, a budget its settled usage exhausted (nothing in flight
    // can give it back) is the one reported.
    const bool exhausted = settled >= limit;
    if (v.admitted || wait > v.retry_after_s ||
        (wait == v.retry_after_s && exhausted && !v.settled)) {
      v.admitted = false;
      v.limit = which;
      v.retry_after_s = wait;
      v.settled = exhausted;
    }
  };
  consider(budget_limit::tokens_per_day, period::day, limits.tokens_per_day, settled_day.tokens,
           in_flight.tokens);
  consider(budget_limit::spend_per_day, period::day, limits.spend_nanousd_per_day,
           settled_day.spend_nanousd, in_flight.spend_nanousd);
  consider(budget_limit::tokens_per_month, period::month, limits.tokens_per_month,
           settled_month.tokens, in_flight.tokens);
  consider(budget_limit::spend_per_month, period::month, limits.spend_nanousd_per_month,
           settled_month.spend_nanousd, in_flight.spend_nanousd);
  return v;
}

}  // namespace tether::ledger
