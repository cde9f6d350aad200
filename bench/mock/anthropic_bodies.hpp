// Response bodies shaped exactly like Anthropic's Messages API (/v1/messages and
// /v1/messages/count_tokens), so that Anthropic's SDKs parse them. As on the OpenAI paths, the
// text names the request's position number and never echoes the prompt.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "bench/mock/openai_bodies.hpp"

namespace tether::mock {

// Anthropic's error type for an HTTP status (400 invalid_request_error, 429 rate_limit_error,
// 503 and 529 overloaded_error, …; api_error for a status it has no name for).
std::string_view anthropic_error_type(unsigned status);

// {"type":"error","error":{"type":…,"message":…}}, the type following from the status.
std::string anthropic_error_body(unsigned status, std::string_view message);

// A whole (non-streaming) `message` object, or for count_tokens the `{"input_tokens":N}` body.
std::string messages_body(const completion_context& ctx);

// The same, total_bytes long (or unpadded, when that is already longer): a message's text is
// padded; a token count, which has no text, is followed by JSON whitespace.
std::string padded_messages_body(const completion_context& ctx, std::size_t total_bytes);

// Streamed piece `index` of `count` as SSE bytes: its `content_block_delta`, the first piece
// opened by `message_start`, `content_block_start` and `ping`, the last closed by
// `content_block_stop`, `message_delta` (stop_reason, output usage) and `message_stop`.
std::string messages_stream_piece_events(const completion_context& ctx, std::uint32_t index,
                                         std::uint32_t count);

// Half of a `content_block_delta` event (mock-sse-cut's last bytes): cut inside its JSON.
std::string_view messages_half_event();

}  // namespace tether::mock
