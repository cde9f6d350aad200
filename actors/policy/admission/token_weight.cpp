#include "actors/policy/admission/token_weight.hpp"

#include <limits>

namespace tether {

std::uint64_t estimate_prompt_tokens(std::size_t body_bytes) {
  return body_bytes / bytes_per_token_estimate;
}

std::uint64_t token_weight(std::uint64_t prompt_tokens, std::optional<std::uint64_t> max_output,
                           std::uint64_t default_max) {
  const auto output = max_output.value_or(default_max);
  const auto most = std::numeric_limits<std::uint64_t>::max();
  return output > most - prompt_tokens ? most : prompt_tokens + output;
}

}  // namespace tether
