#include "actors/policy/ledger/waste.hpp"

namespace tether::ledger {

std::uint64_t waste_tokens(std::int64_t first_byte_ns, std::int64_t caller_left_ns,
                           std::int64_t work_ended_ns, std::uint64_t relayed_tokens) {
  if (relayed_tokens == 0 || caller_left_ns <= first_byte_ns || work_ended_ns <= caller_left_ns)
    return 0;
  // Per token, rounded up: a pace never faster than the stream showed.
  const auto streamed = static_cast<std::uint64_t>(caller_left_ns - first_byte_ns);
  const auto per_token = (streamed + relayed_tokens - 1) / relayed_tokens;
  const auto after = static_cast<std::uint64_t>(work_ended_ns - caller_left_ns);
  return (after + per_token - 1) / per_token;
}

}  // namespace tether::ledger
