// Response bodies shaped exactly like OpenAI's (chat, completions, embeddings, Responses), so
// that official SDKs parse them. The mock never
// echoes a prompt: completion text names the request's position number instead. The functions
// below that take a completion_context answer Anthropic's APIs too, through anthropic_bodies.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <boost/json/fwd.hpp>

namespace tether::mock {

// messages and count_tokens are Anthropic's /v1/messages and /v1/messages/count_tokens.
enum class api_kind { chat, completion, embedding, responses, messages, count_tokens };

struct completion_context {
  api_kind api = api_kind::chat;
  std::uint64_t request_id = 0;
  std::string_view model;        // echoed as requested
  std::size_t prompt_bytes = 0;  // stands in for a token count (bytes / 4)
  // Chat and completions streams: stream_options.include_usage asked for a last chunk with the
  // usage and no choices, as OpenAI sends it.
  bool include_usage = false;
};

std::string error_body(std::string_view message, std::string_view type, std::string_view code);

// The error body of the request's API: OpenAI's error_body, or on Anthropic's paths Anthropic's
// shape, whose type follows from the status (type and code are then unused).
std::string error_body_for(const completion_context& ctx, unsigned status, std::string_view message,
                           std::string_view type, std::string_view code);

// What every API's bodies say, shared with anthropic_bodies.cpp: the whole text, the text of
// streamed piece `index` of `count` (a one-piece stream, model `mock`'s, is the whole text, so
// that its stream and its whole answer say the same), the output tokens of a stream of `count`
// pieces (of the whole answer for one), the prompt's token count, and one named SSE event.
std::string full_text(const completion_context& ctx);
std::string piece_text(const completion_context& ctx, std::uint32_t index, std::uint32_t count);
std::int64_t stream_output_tokens(std::uint32_t count);
std::int64_t prompt_tokens(const completion_context& ctx);
std::string named_event(std::string_view name, const boost::json::object& data);

// A whole (non-streaming) chat.completion, text_completion, (Responses) response or (Anthropic)
// message object, or count_tokens' token count.
std::string completion_body(const completion_context& ctx);

// The same, its text padded so that the serialized body is total_bytes long (or the unpadded
// body, when that is already longer).
std::string padded_completion_body(const completion_context& ctx, std::size_t total_bytes);

// Streamed piece `index` of `count`: a chat.completion.chunk or text_completion object, the JSON
// only (the caller frames it as an SSE event). The first chat piece carries the role, the last
// one finish_reason "stop".
std::string stream_chunk_body(const completion_context& ctx, std::uint32_t index,
                              std::uint32_t count);

// Streamed piece `index` of `count` as the SSE bytes to send ("event:"/"data:" lines and the
// blank line ending each event). Chat and completions: one data-only event of
// stream_chunk_body (the last piece followed by the usage chunk when include_usage). Responses: the
// events the Responses API sends around the piece's `response.output_text.delta` (the first piece
// opens with `response.created`, `response.in_progress`, `response.output_item.added`,
// `response.content_part.added`; the last closes with the matching `.done` events and
// `response.completed`), each with its sequence_number. Messages (and count_tokens, streamed only
// by the hostile behaviours): the Messages API's events (anthropic_bodies.hpp).
std::string stream_piece_events(const completion_context& ctx, std::uint32_t index,
                                std::uint32_t count);

// stream_piece_events with the moment it is sent, `sent_us` (epoch µs), as the chunk's
// `mock_sent_us` (mock-stream-stamped-<n>x<ms>). Chat and completions only: the other APIs'
// events are sent unstamped.
std::string stamped_stream_piece_events(const completion_context& ctx, std::uint32_t index,
                                        std::uint32_t count, std::int64_t sent_us);

// The SSE bytes that end a whole stream after its last piece: "data: [DONE]" for chat and
// completions, nothing for Responses and Messages (whose `response.completed` or `message_stop`
// is the end).
std::string_view stream_end_events(const completion_context& ctx);

// Half an SSE event of the request's API, cut inside its JSON (mock-sse-cut's last bytes).
std::string_view half_stream_event(const completion_context& ctx);

// A `list` of `embedding` objects: one per input string (or token array).
std::string embeddings_body(const completion_context& ctx, std::size_t inputs);

// How many embeddings an embeddings request's `input` asks for.
std::size_t embedding_input_count(const boost::json::value& input);

std::string models_body();

}  // namespace tether::mock
