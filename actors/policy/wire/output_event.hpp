// Whether a relayed stream event carries generated output (a token, by the engines' one piece per
// event), per surface: what the ledger counts as the completion when the upstream reported no
// usage (contract: "The ledger": tether counts what it relayed and marks the record estimated).
#pragma once

#include <string_view>

#include "actors/policy/wire/surface.hpp"

namespace tether {

// `event` is one whole event as relayed (its lines, without the blank line that ends it).
bool carries_output(surface where, std::string_view event);

// Whether a chat or completions stream event is the usage chunk `stream_options.include_usage`
// asks for (no choices, a usage object): the one tether asks for on a caller's behalf and keeps
// from a caller who did not ask for it.
bool is_usage_chunk(std::string_view event);

}  // namespace tether
