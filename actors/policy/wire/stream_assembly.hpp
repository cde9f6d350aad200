// The non-streaming answer built from the events of one upstream stream (docs/contract.md,
// `upstream_stream = "always"`): some engines notice a caller who left only when they write a
// token to it, so tether asks them for a stream even when the caller did not, and answers the
// caller with the body the engine would have sent whole. Pure: fed whole SSE events (as
// net::sse_framer cuts them), no sockets, no clock.
//
// Per surface:
// - chat: the chunks' top-level fields (id, created, model, system_fingerprint, the engine's
//   own extras), object "chat.completion", and per choice index its message (role; content,
//   reasoning_content and refusal concatenated; tool_calls merged by index: id, type, function
//   name, arguments concatenated), logprobs (each array concatenated) and finish_reason; usage
//   from the chunk that carries it; a content that never came is null, or "" for an engine
//   whose whole answer says so (stream_assembly_shape). Ends with `data: [DONE]`.
// - completions: the same with text instead of a message. Ends with `data: [DONE]`.
// - responses: the `response` of response.completed (or .incomplete / .failed, the Responses
//   API's other terminal events).
// - messages: message_start's message, its content blocks (text, thinking, tool_use whose input
//   is its input_json_delta pieces parsed), message_delta's stop_reason, stop_sequence and usage.
//   Ends with message_stop.
// A stream that ends before its terminal event, an event that is not JSON, or an error event is
// a failure; so is an answer that outgrows max_bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "config/surface.hpp"

namespace tether {

// Where engines' whole answers differ though their streams say the same.
struct stream_assembly_shape {
  // chat: a message that no content piece came for has content "" (llama.cpp's whole answer,
  // though its stream's role chunk says null), not null (OpenAI's, with the same null streamed).
  bool content_never_null = false;
};

class stream_assembly {
 public:
  enum class failure { none, malformed, too_large };

  // max_bytes: the most the assembled answer may take (0 = no limit).
  stream_assembly(surface where, std::uint64_t max_bytes, stream_assembly_shape shape = {});
  ~stream_assembly();
  stream_assembly(stream_assembly&&) noexcept;
  stream_assembly& operator=(stream_assembly&&) noexcept;

  // One whole SSE event, its blank line included. Events after the terminal one, or after a
  // failure, are ignored.
  void add(std::string_view event);

  // The stream's body ended: the assembled answer, serialised, or a failure (no terminal event,
  // too large). now_unix_s fills a Responses answer's `completed_at` when the engine's terminal
  // event has none (its whole answer has one).
  std::string finish(std::int64_t now_unix_s);

  // The terminal event came.
  bool complete() const;
  failure failed() const;
  // Says what went wrong, never quoting the stream.
  const std::string& error() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace tether
