#include "actors/policy/admission/queue_priority.hpp"

#include <algorithm>

namespace tether {
namespace {

// Each class spans 2^60 microseconds (tens of thousands of years of arrivals), so the three
// classes and any arrival fit an int64 without overlapping.
constexpr std::int64_t class_span = std::int64_t{1} << 60;

}  // namespace

asked_priority priority_of(const std::string* header, priority max) {
  asked_priority out;
  if (header != nullptr) {
    auto named = priority_named(*header);
    if (!named) return {priority::normal, false};
    out.value = *named;
  }
  // A larger enum value is a lower class: the cap is the larger of the two.
  out.value = std::max(out.value, max);
  return out;
}

std::int64_t queue_rank(priority p, std::int64_t arrival_wall_ns) {
  const auto arrival_us = std::clamp<std::int64_t>(arrival_wall_ns / 1000, 0, class_span - 1);
  return static_cast<std::int64_t>(p) * class_span + arrival_us;
}

}  // namespace tether
