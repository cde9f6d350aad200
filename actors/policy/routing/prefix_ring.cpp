#include "actors/policy/routing/prefix_ring.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tether {

std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

std::uint64_t hash_bytes(std::string_view bytes, std::uint64_t seed) {
  std::uint64_t h = 0xcbf29ce484222325ULL ^ seed;
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return mix64(h);
}

prefix_ring::prefix_ring(std::span<const member> members) {
  std::uint32_t divisor = 0;
  for (const auto& m : members) divisor = std::gcd(divisor, std::max<std::uint32_t>(m.weight, 1));
  for (std::size_t i = 0; i < members.size(); ++i) {
    deployments_.push_back(members[i].deployment);
    const auto points =
        points_per_weight * (std::max<std::uint32_t>(members[i].weight, 1) / divisor);
    for (std::uint32_t p = 0; p < points; ++p) {
      points_.push_back({mix64(members[i].identity + 0x9e3779b97f4a7c15ULL * (p + 1)),
                         static_cast<std::uint32_t>(i)});
    }
  }
  // Ties (all but impossible) broken by the member's identity, not its place in the list, so
  // that the order of the configuration's entries never moves a key.
  std::sort(points_.begin(), points_.end(), [&](const point& a, const point& b) {
    if (a.position != b.position) return a.position < b.position;
    return members[a.member].identity < members[b.member].identity;
  });
}

prefix_ring::order_list prefix_ring::order(std::uint64_t key) const {
  order_list out;
  if (points_.empty()) return out;
  auto it = std::lower_bound(points_.begin(), points_.end(), key,
                             [](const point& p, std::uint64_t k) { return p.position < k; });
  const std::size_t start = static_cast<std::size_t>(it - points_.begin());
  boost::container::small_vector<bool, 8> seen(deployments_.size(), false);
  for (std::size_t n = 0; n < points_.size() && out.size() < deployments_.size(); ++n) {
    const auto m = points_[(start + n) % points_.size()].member;
    if (seen[m]) continue;
    seen[m] = true;
    out.push_back(deployments_[m]);
  }
  return out;
}

std::optional<std::size_t> first_within_bound(std::span<const ring_candidate> in_ring_order,
                                              double factor) {
  std::uint64_t live = 0;
  std::uint64_t weight = 0;
  for (const auto& c : in_ring_order) {
    live += c.live;
    weight += std::max<std::uint32_t>(c.weight, 1);
  }
  for (std::size_t i = 0; i < in_ring_order.size(); ++i) {
    const auto& c = in_ring_order[i];
    const double share = static_cast<double>(live + 1) * std::max<std::uint32_t>(c.weight, 1) /
                         static_cast<double>(weight);
    const auto bound = static_cast<std::uint64_t>(std::ceil(factor * share));
    if (c.live + 1 <= bound) return i;
  }
  return std::nullopt;
}

}  // namespace tether
