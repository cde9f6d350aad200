#include "actors/policy/routing/health_bulletin.hpp"

namespace tether {

namespace {
constexpr std::int64_t ns_per_ms = 1'000'000;
}

void health_bulletin::post(const std::string& upstream, std::int32_t reason,
                           std::int64_t duration_ms, std::int64_t now_ns) {
  if (duration_ms <= 0) return;
  const auto until = now_ns + duration_ms * ns_per_ms;
  auto [it, fresh] = ends_.try_emplace(upstream, entry{reason, until});
  if (!fresh && until > it->second.until_ns) it->second = entry{reason, until};
}

std::vector<health_bulletin::notice> health_bulletin::running(std::int64_t now_ns) {
  std::vector<notice> out;
  for (auto it = ends_.begin(); it != ends_.end();) {
    if (it->second.until_ns <= now_ns) {
      it = ends_.erase(it);
      continue;
    }
    // Rounded up: a notice of 0 ms would eject nothing.
    const auto left = (it->second.until_ns - now_ns + ns_per_ms - 1) / ns_per_ms;
    out.push_back({it->first, it->second.reason, left});
    ++it;
  }
  return out;
}

}  // namespace tether
