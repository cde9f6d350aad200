#include "actors/policy/engine/release_grace.hpp"

#include <algorithm>

namespace tether {

std::chrono::nanoseconds release_grace(const release_facts& facts,
                                       std::optional<std::chrono::nanoseconds> observed_step,
                                       std::chrono::milliseconds max) {
  using std::chrono::nanoseconds;
  if (!facts.engine_named || !facts.held_slot || !facts.request_sent || !facts.cut)
    return nanoseconds{0};
  if (max.count() <= 0) return nanoseconds{0};
  const nanoseconds bound = max;
  if (!observed_step) return bound;
  return std::min(bound, grace_steps * *observed_step + nanoseconds{grace_slack});
}

}  // namespace tether
