#include "actors/policy/surface.hpp"

#include "actors/policy/json_text.hpp"
#include "actors/policy/outcome.hpp"

namespace tether {

std::optional<surface> surface_of(std::string_view path) {
  if (path == "/v1/chat/completions") return surface::chat;
  if (path == "/v1/completions") return surface::completions;
  if (path == "/v1/embeddings") return surface::embeddings;
  if (path == "/v1/responses") return surface::responses;
  return std::nullopt;
}

bool can_stream(surface s) {
  return s != surface::embeddings;
}

stream_error stream_error_of(surface s, std::string_view type, std::string_view message,
                             std::string_view request_id) {
  if (s != surface::responses) {
    return {{}, error_body(outcome::stream_interrupted, type, message, request_id)};
  }
  // The Responses API's own error event: its `type` is always "error", so the cause is in the
  // message the gateway wrote.
  std::string data;
  data.reserve(80 + json_string_max(message.size()) + json_string_max(request_id.size()));
  data += R"({"type":"error","code":"stream_interrupted","message":)";
  append_json_string(data, message);
  data += R"(,"param":null,"request_id":)";
  append_json_string(data, request_id);
  data += "}";
  return {"error", std::move(data)};
}

}  // namespace tether
