// The affinity key of a request to a model with routing = "prefix": what the ring places
// (actors/policy/routing/prefix_ring.hpp). In order: the caller's `prompt_cache_key` (a string
// member of the body), its `x-session-affinity` header, else a hash of the first `prefix_bytes`
// of the prompt in its canonical form. The canonical form is one record per message, in
// order: the role, a 0x1F byte, the message's text (a string content, or the `text` members of
// its content parts, joined), a 0x1E byte; the system prompt (responses' `instructions`,
// messages' `system`) comes first as a "system" record, a bare string prompt or input is a
// "user" record. So the same conversation on chat, responses and messages has the same prefix
// where its prompt is the same. A member repeated inside a message or a content part counts
// each of its values, in order: the prompt is read as it comes and the read stops once the
// prefix is full, before a later repeat could be seen.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "config/surface.hpp"

namespace tether {

// The first `prefix_bytes` of the canonical prompt (fewer when the prompt is shorter). Reads the
// body's top-level members by their bytes and parses only the prompt's members, up to where
// the prefix is complete (`parsed`, when given, is told how many bytes were parsed).
// Precondition: inspect_model_request accepted the body.
std::string canonical_prefix(surface where, std::string_view body, std::uint32_t prefix_bytes,
                             std::size_t* parsed = nullptr);

// nullopt: no key (an empty prompt, no cache key, no header): the request goes by least work.
// `session_header`: the x-session-affinity header's value, null when absent.
std::optional<std::uint64_t> affinity_key(surface where, std::string_view body,
                                          const std::string* session_header,
                                          std::uint32_t prefix_bytes);

}  // namespace tether
