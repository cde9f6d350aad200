// How an upstream is sent its key, by the API it speaks: `Authorization: Bearer` to an OpenAI-API
// server, `x-api-key` with `anthropic-version` (and the caller's `anthropic-beta`) to Anthropic's.
#pragma once

#include <string_view>

#include "config/config.hpp"
#include "net/http_types.hpp"

namespace tether {

// The version sent to an Anthropic upstream when the caller named none.
inline constexpr std::string_view default_anthropic_version = "2023-06-01";

// Appends the upstream's key (if it has one) and the Anthropic version headers. The caller's
// anthropic-version and anthropic-beta (empty: not sent) also go to an OpenAI-API server that
// serves /v1/messages, which may read them.
void add_upstream_auth(net::header_list& headers, const config::upstream_config& up,
                       std::string_view anthropic_version = {},
                       std::string_view anthropic_beta = {});

}  // namespace tether
