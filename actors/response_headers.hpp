// The headers every model response carries about itself: x-tether-outcome always, and on a
// non-2xx x-should-retry and (with a Retry-After) retry-after-ms, so that an SDK's own retries
// do not multiply the work the gateway's budget already bounded.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "actors/policy/request/outcome.hpp"
#include "net/http_types.hpp"

namespace tether {

// Appends to `headers` (which may hold a retry-after already: its value is used when
// `retry_after` is not given). `caller_left` as for client_should_retry.
void add_outcome_headers(net::header_list& headers, int status, outcome o,
                         std::optional<std::chrono::milliseconds> retry_after = std::nullopt,
                         std::optional<std::chrono::milliseconds> caller_left = std::nullopt);

// The headers of an error tether makes itself (a JSON body): its request id, a Retry-After
// (`retry_after` rounded up to seconds; one second when overloaded or shutting down) and the
// outcome headers above.
net::header_list error_headers(const std::string& request_id, int status, outcome o,
                               std::optional<std::chrono::milliseconds> retry_after = std::nullopt,
                               std::optional<std::chrono::milliseconds> caller_left = std::nullopt);

}  // namespace tether
