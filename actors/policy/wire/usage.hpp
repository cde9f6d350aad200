// The tokens an upstream reports a request used: the `usage` object of a response body, or of a
// stream's event (OpenAI chat's last chunk with stream_options.include_usage, Responses'
// response.completed, Anthropic's message_start and message_delta). Read without parsing the
// document: the last `"usage":{…}` member in the text is parsed alone, so a relayed stream is
// never buffered and a large body costs one scan.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tether {

struct token_usage {
  std::optional<std::uint64_t> prompt;      // prompt_tokens | input_tokens (+ Anthropic's cache)
  std::optional<std::uint64_t> completion;  // completion_tokens | output_tokens
  // The part of the prompt read from the upstream's prompt cache: prompt_tokens_details' |
  // input_tokens_details' cached_tokens | Anthropic's cache_read_input_tokens, the first there
  // is. Only with a prompt or completion count (a usage without either is none).
  std::optional<std::uint64_t> cached;
  bool operator==(const token_usage&) const = default;
};

// The usage the text reports, if it has a `usage` object with either count.
std::optional<token_usage> usage_of(std::string_view text);

// A later report's counts replace the earlier ones (Anthropic tells the input at the stream's
// start and the output at its end).
void merge_usage(token_usage& into, const token_usage& later);

}  // namespace tether
