#include "actors/policy/ledger/utc_period.hpp"

#include <chrono>

namespace tether::ledger {

namespace {

// Floor, not truncation: a time before 1970 belongs to the hour or day that began before it.
std::int64_t floor_to(std::int64_t value, std::int64_t step) {
  const auto q = value / step;
  return (value % step < 0 ? q - 1 : q) * step;
}

}  // namespace

std::int64_t hour_start(std::int64_t unix_s) {
  return floor_to(unix_s, 3600);
}

period_span span_of(period p, std::int64_t unix_s) {
  using namespace std::chrono;
  const auto day = floor_to(unix_s, 86400);
  if (p == period::day) return {day, day + 86400};
  const year_month_day date{sys_days{days{day / 86400}}};
  const year_month month{date.year(), date.month()};
  const auto first = sys_days{month / 1};
  const auto next = sys_days{(month + months{1}) / 1};
  return {duration_cast<seconds>(first.time_since_epoch()).count(),
          duration_cast<seconds>(next.time_since_epoch()).count()};
}

std::int64_t seconds_to_end(period p, std::int64_t unix_s) {
  return span_of(p, unix_s).end - unix_s;
}

}  // namespace tether::ledger
