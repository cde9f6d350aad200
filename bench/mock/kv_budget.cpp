#include "bench/mock/kv_budget.hpp"

#include <algorithm>
#include <limits>
#include <string_view>

namespace tether::mock {
namespace {

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
  const auto most = std::numeric_limits<std::uint64_t>::max();
  return b > most - a ? most : a + b;
}

}  // namespace

std::optional<std::uint64_t> requested_output_limit(const boost::json::object& body) {
  std::optional<std::uint64_t> out;
  for (std::string_view key : {"max_tokens", "max_completion_tokens", "max_output_tokens"}) {
    const auto* value = body.if_contains(key);
    if (value == nullptr) continue;
    std::optional<std::uint64_t> limit;
    if (value->is_uint64()) limit = value->get_uint64();
    if (value->is_int64() && value->get_int64() >= 0) {
      limit = static_cast<std::uint64_t>(value->get_int64());
    }
    if (limit && (!out || *limit > *out)) out = limit;
  }
  return out;
}

std::uint64_t kv_demand(std::size_t body_bytes, std::optional<std::uint64_t> max_output) {
  return saturating_add(body_bytes / 4, max_output.value_or(kv_default_max_tokens));
}

bool kv_books::try_hold(std::uint64_t budget, std::uint64_t demand) {
  auto& held = held_[budget];
  const auto asked = saturating_add(held, demand);
  peak_demand_tokens_ = std::max(peak_demand_tokens_, asked);
  if (asked > budget) {
    ++over_budget_;
    return false;
  }
  held = asked;
  ++admitted_;
  peak_tokens_ = std::max(peak_tokens_, held);
  return true;
}

void kv_books::release(std::uint64_t budget, std::uint64_t demand) {
  auto it = held_.find(budget);
  if (it == held_.end()) return;
  it->second -= std::min(it->second, demand);
  if (it->second == 0) held_.erase(it);
}

void kv_books::reset() {
  admitted_ = over_budget_ = 0;
  peak_tokens_ = 0;
  for (const auto& [budget, held] : held_) peak_tokens_ = std::max(peak_tokens_, held);
  peak_demand_tokens_ = peak_tokens_;
}

std::uint64_t kv_books::tokens_in_flight() const {
  std::uint64_t sum = 0;
  for (const auto& [budget, held] : held_) sum = saturating_add(sum, held);
  return sum;
}

}  // namespace tether::mock
