// Response bodies shaped exactly like OpenAI's, so that official SDKs parse them. The mock never
// echoes a prompt: completion text names the request's position number instead.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <boost/json/fwd.hpp>

namespace tether::mock {

enum class api_kind { chat, completion, embedding };

struct completion_context {
  api_kind api = api_kind::chat;
  std::uint64_t request_id = 0;
  std::string_view model;        // echoed as requested
  std::size_t prompt_bytes = 0;  // stands in for a token count (bytes / 4)
};

std::string error_body(std::string_view message, std::string_view type, std::string_view code);

// A whole (non-streaming) chat.completion or text_completion object.
std::string completion_body(const completion_context& ctx);

// The same, its text padded so that the serialized body is total_bytes long (or the unpadded
// body, when that is already longer).
std::string padded_completion_body(const completion_context& ctx, std::size_t total_bytes);

// Streamed piece `index` of `count`: a chat.completion.chunk or text_completion object, the JSON
// only (the caller frames it as an SSE event). The first chat piece carries the role, the last
// one finish_reason "stop".
std::string stream_chunk_body(const completion_context& ctx, std::uint32_t index,
                              std::uint32_t count);

// A `list` of `embedding` objects: one per input string (or token array).
std::string embeddings_body(const completion_context& ctx, std::size_t inputs);

// How many embeddings an embeddings request's `input` asks for.
std::size_t embedding_input_count(const boost::json::value& input);

std::string models_body();

}  // namespace tether::mock
