// A request's token weight (contract: "Token-aware admission"): what the budget holds against an
// upstream's max_tokens_in_flight while the request's work runs. A model server's KV cache holds
// the prompt and every token it may still generate, so the weight is both, reserved whole at
// admission: an estimate of the prompt from the body's size, and the output limit the request
// names or its model's default.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace tether {

// About four bytes of English text or JSON per token for the common tokenizers; the body's JSON
// framing makes this an overestimate, the safe side for a cache.
inline constexpr std::size_t bytes_per_token_estimate = 4;

std::uint64_t estimate_prompt_tokens(std::size_t body_bytes);

// prompt + (max_output, else default_max): saturating, so an absurd max_tokens is simply heavier
// than any cap.
std::uint64_t token_weight(std::uint64_t prompt_tokens, std::optional<std::uint64_t> max_output,
                           std::uint64_t default_max);

}  // namespace tether
