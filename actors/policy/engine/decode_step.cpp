#include "actors/policy/engine/decode_step.hpp"

#include <algorithm>

namespace tether {

void decode_step::observe(duration gap, std::size_t events) {
  if (events == 0 || gap.count() <= 0) return;
  // At least 1 ns: 0 means "no sample yet".
  const std::int64_t sample =
      std::max<std::int64_t>(1, gap.count() / static_cast<std::int64_t>(events));
  const std::int64_t s = smoothed_ns_.load(std::memory_order_relaxed);
  const std::int64_t next = s == 0 ? sample : std::max<std::int64_t>(1, s + (sample - s) / 8);
  smoothed_ns_.store(next, std::memory_order_relaxed);
}

std::optional<decode_step::duration> decode_step::current() const {
  const std::int64_t s = smoothed_ns_.load(std::memory_order_relaxed);
  if (s == 0) return std::nullopt;
  return duration{s};
}

bool is_token_event(std::string_view event) {
  const auto at = event.find("data:");
  if (at == std::string_view::npos) return false;
  auto data = event.substr(at + 5);
  while (!data.empty() && data.front() == ' ') data.remove_prefix(1);
  return data.substr(0, 6) != "[DONE]";
}

}  // namespace tether
