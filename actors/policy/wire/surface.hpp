// What differs between the model APIs a caller may speak (config/surface.hpp names them) on the
// gateway's own words: the shape of its error bodies and of the event that ends an interrupted
// stream. Everything else about a request's life is the same on every surface.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "actors/policy/request/outcome.hpp"
#include "config/surface.hpp"

namespace tether {

// The surface served at `path` (the target without its query), or nullopt for a path that is
// not a model surface.
std::optional<surface> surface_of(std::string_view path);

// Whether a request on `s` may ask for a stream (embeddings and count_tokens never stream).
bool can_stream(surface s);

// Whether the surface is Anthropic's: its errors are Anthropic-shaped and the gateway key may
// come as x-api-key.
bool is_anthropic(surface s);

// The body of an error the gateway answers with `status` on `s`. OpenAI surfaces:
// {"error":{"message","type","code":<outcome>,"request_id"}}. Anthropic surfaces:
// {"type":"error","error":{"type":T,"message"},"request_id"} with T by status (400
// invalid_request_error, 401 authentication_error, ..., 504 timeout_error); the outcome is then
// only in x-tether-outcome.
std::string error_body_on(surface s, int status, outcome o, std::string_view message,
                          std::string_view request_id);

// Anthropic's error `type` for a status.
std::string_view anthropic_error_type(int status);

// What a stream the gateway has to cut after its first event ends with: one SSE event in the
// surface's own error shape (net::make_error_event frames it). Chat and completions: no event
// name, the OpenAI error object (code stream_interrupted, `type` naming the cause). Responses:
// `event: error` with {"type":"error","code":"stream_interrupted","message":...}. Messages:
// `event: error` with {"type":"error","error":{"type":"api_error","message":...}}.
struct stream_error {
  std::string_view event;  // the SSE event name; empty: none
  std::string data;        // JSON
};
stream_error stream_error_of(surface s, std::string_view type, std::string_view message,
                             std::string_view request_id);

// On /v1/responses the cut stream's last event, after its error event: the Responses API's own
// `event: response.failed`, so that its clients (Codex CLI, the Agents SDK) show the real
// reason: {"type":"response.failed","sequence_number":N,"response":{"id","object":"response",
// "created_at","status":"failed","model","output":[],"error":{"code":"stream_interrupted",
// "message"},"incomplete_details":null}}. `response_id` is the id the stream's first event
// carried; `sequence_number` follows the events relayed and the error event.
stream_error responses_failed_of(std::string_view response_id, std::int64_t created_at,
                                 std::string_view model, std::uint64_t sequence_number,
                                 std::string_view message);

}  // namespace tether
