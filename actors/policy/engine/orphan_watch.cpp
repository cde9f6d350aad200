#include "actors/policy/engine/orphan_watch.hpp"

#include <algorithm>

namespace tether {

void orphan_watch::observe(std::int64_t engine, std::int64_t tether) {
  excess_[next_] = std::max<std::int64_t>(0, engine - tether);
  next_ = (next_ + 1) % grace_polls;
  if (streak_ < grace_polls) ++streak_;
}

void orphan_watch::forget() {
  streak_ = 0;
}

std::int64_t orphan_watch::orphaned() const {
  if (streak_ < grace_polls) return 0;
  return *std::min_element(excess_.begin(), excess_.end());
}

}  // namespace tether
