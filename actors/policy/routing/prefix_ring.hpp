// routing = "prefix": one model's deployments on a consistent-hash ring, and the bounded-load
// choice along it (consistent hashing with bounded loads, Mirrokni et al.). A key's home is the
// first deployment clockwise from the key's position; one whose live work would pass the bound
// passes the key on to the next. Each deployment's points on the ring come from its identity (its
// upstream's name and the model name sent there), not its position in the configuration, so a
// deployment added or removed moves only the keys whose home it is or becomes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <boost/container/small_vector.hpp>

namespace tether {

// 64 well-mixed bits (splitmix64's finaliser): ring positions and keys are spread evenly.
std::uint64_t mix64(std::uint64_t x);
// FNV-1a over the bytes, mixed: a deployment's identity, an affinity key's text.
std::uint64_t hash_bytes(std::string_view bytes, std::uint64_t seed = 0);

class prefix_ring {
 public:
  struct member {
    std::size_t deployment = 0;  // what order() returns
    std::uint64_t identity = 0;  // hash_bytes of what names the deployment across reloads
    std::uint32_t weight = 1;    // its upstream's weight: that many times the points
  };
  // Points per unit of weight (weights divided by their common divisor first): enough that each
  // deployment's share of the keys is within a few percent of its weight's.
  static constexpr std::uint32_t points_per_weight = 160;

  prefix_ring() = default;
  explicit prefix_ring(std::span<const member> members);

  bool empty() const { return points_.empty(); }
  using order_list = boost::container::small_vector<std::size_t, 8>;
  // The deployments clockwise from the key's position, each once: the first is the key's home,
  // the next where it spills.
  order_list order(std::uint64_t key) const;

 private:
  struct point {
    std::uint64_t position;
    std::uint32_t member;
  };
  std::vector<point> points_;  // by position
  std::vector<std::size_t> deployments_;
};

// A deployment on the key's path, in ring order, with what the bound reads.
struct ring_candidate {
  std::size_t deployment = 0;
  std::uint64_t live = 0;  // its live work now
  std::uint32_t weight = 1;
};

// The position in `in_ring_order` of the first candidate whose live work, this request counted,
// stays within ⌈factor × (the candidates' live work + 1) × its weight / their total weight⌉: its
// share of the work, this request counted, times the factor, rounded up so that a lone request
// never spills. Some candidate always fits when factor > 1 (the bounds add up to more than the
// work); nullopt only for an empty list.
std::optional<std::size_t> first_within_bound(std::span<const ring_candidate> in_ring_order,
                                              double factor);

}  // namespace tether
