#include "actors/policy/ledger/aggregate_key.hpp"

namespace tether::ledger {

std::size_t aggregate_key_hash::operator()(const aggregate_key& k) const {
  std::size_t h = std::hash<std::string>{}(k.key);
  // boost::hash_combine's mixing: the three names differ in few characters across rows.
  const auto mix = [&h](std::size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  mix(std::hash<std::string>{}(k.model));
  mix(std::hash<std::string>{}(k.upstream));
  mix(std::hash<std::int64_t>{}(k.hour));
  return h;
}

}  // namespace tether::ledger
