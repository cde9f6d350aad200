#include "actors/policy/wire/surface.hpp"

#include "actors/policy/wire/json_text.hpp"

namespace tether {
namespace {

std::string anthropic_error(std::string_view type, std::string_view message,
                            std::string_view request_id) {
  std::string data;
  data.reserve(64 + json_string_max(type.size()) + json_string_max(message.size()) +
               json_string_max(request_id.size()));
  data += R"({"type":"error","error":{"type":)";
  append_json_string(data, type);
  data += R"(,"message":)";
  append_json_string(data, message);
  data += R"(},"request_id":)";
  append_json_string(data, request_id);
  data += "}";
  return data;
}

}  // namespace

std::optional<surface> surface_of(std::string_view path) {
  for (std::size_t i = 0; i < surface_count; ++i) {
    const auto s = static_cast<surface>(i);
    if (path_of(s) == path) return s;
  }
  return std::nullopt;
}

bool can_stream(surface s) {
  return s != surface::embeddings && s != surface::count_tokens;
}

bool is_anthropic(surface s) {
  return s == surface::messages || s == surface::count_tokens;
}

std::string_view anthropic_error_type(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    case 504:
      return "timeout_error";
    default:
      break;
  }
  // 405, 431 and the like are the caller's to fix; 499, 500, 502 and the rest are the API's.
  return status >= 400 && status < 499 ? "invalid_request_error" : "api_error";
}

std::string error_body_on(surface s, int status, outcome o, std::string_view message,
                          std::string_view request_id) {
  if (!is_anthropic(s)) return error_body(o, message, request_id);
  return anthropic_error(anthropic_error_type(status), message, request_id);
}

stream_error stream_error_of(surface s, std::string_view type, std::string_view message,
                             std::string_view request_id) {
  if (is_anthropic(s)) {
    // The Messages API's own error event; the cause is in the message the gateway wrote.
    return {"error", anthropic_error("api_error", message, request_id)};
  }
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

stream_error responses_failed_of(std::string_view response_id, std::int64_t created_at,
                                 std::string_view model, std::uint64_t sequence_number,
                                 std::string_view message) {
  std::string data;
  data.reserve(200 + json_string_max(response_id.size()) + json_string_max(model.size()) +
               json_string_max(message.size()));
  data += R"({"type":"response.failed","sequence_number":)";
  data += std::to_string(sequence_number);
  data += R"(,"response":{"id":)";
  append_json_string(data, response_id);
  data += R"(,"object":"response","created_at":)";
  data += std::to_string(created_at);
  data += R"(,"status":"failed","model":)";
  append_json_string(data, model);
  data += R"(,"output":[],"error":{"code":"stream_interrupted","message":)";
  append_json_string(data, message);
  data += R"(},"incomplete_details":null}})";
  return {"response.failed", std::move(data)};
}

}  // namespace tether
