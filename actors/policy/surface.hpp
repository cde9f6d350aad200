// The model APIs a caller may speak to the gateway, and what differs between them on the
// gateway's own words (today: how an interrupted stream says so). Everything else about a
// request's life is the same on every surface.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tether {

enum class surface { chat, completions, embeddings, responses };

// The surface served at `path` (the target without its query), or nullopt for a path that is
// not a model surface.
std::optional<surface> surface_of(std::string_view path);

// Whether a request on `s` may ask for a stream (embeddings never stream).
bool can_stream(surface s);

// What a stream the gateway has to cut after its first event ends with: one SSE event in the
// surface's own error shape (net::make_error_event frames it). Chat and completions: no event
// name, the OpenAI error object (code stream_interrupted, `type` naming the cause). Responses:
// `event: error` with {"type":"error","code":"stream_interrupted","message":...}.
struct stream_error {
  std::string_view event;  // the SSE event name; empty: none
  std::string data;        // JSON
};
stream_error stream_error_of(surface s, std::string_view type, std::string_view message,
                             std::string_view request_id);

}  // namespace tether
