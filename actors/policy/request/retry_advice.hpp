// What a model response tells the caller's SDK about retrying it (x-should-retry, which the
// official OpenAI and Anthropic SDKs obey before their own retry rules). The gateway has already
// spent the retries the request's budget allowed, so a client retry is only advised where waiting
// helps: the gateway or the upstream is momentarily full, and the wait it asks fits the caller.
#pragma once

#include <chrono>
#include <optional>

#include "actors/policy/request/outcome.hpp"

namespace tether {

// `retry_after` is what the response asks the caller to wait (nullopt = nothing asked);
// `caller_left` what is left of the deadline the caller declared itself (X-Request-Deadline-Ms),
// nullopt when it declared none.
bool client_should_retry(outcome o, std::optional<std::chrono::milliseconds> retry_after,
                         std::optional<std::chrono::milliseconds> caller_left);

}  // namespace tether
