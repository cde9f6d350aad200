#include "actors/policy/request/outcome.hpp"

#include <array>
#include <string>

#include "actors/policy/wire/json_text.hpp"

namespace tether {
namespace {

struct outcome_info {
  std::string_view name;
  int status;
  std::string_view type;
};

constexpr std::array<outcome_info, outcome_count> infos{{
    {"ok", 200, ""},
    {"upstream_rejected", 400, "invalid_request_error"},
    {"upstream_rate_limited", 429, "rate_limit_error"},
    {"upstream_failed", 502, "upstream_error"},
    {"upstream_timeout", 504, "timeout_error"},
    {"deadline_exceeded", 504, "timeout_error"},
    {"stream_interrupted", 200, "upstream_error"},
    {"client_disconnected", 499, "client_error"},
    {"overloaded", 503, "overloaded_error"},
    {"rate_limited", 429, "rate_limit_error"},
    {"budget_exhausted", 429, "insufficient_quota"},
    {"headers_too_large", 431, "invalid_request_error"},
    {"bad_request", 400, "invalid_request_error"},
    {"unknown_model", 404, "invalid_request_error"},
    {"unauthorized", 401, "authentication_error"},
    {"forbidden", 403, "permission_error"},
    {"payload_too_large", 413, "invalid_request_error"},
    {"shutting_down", 503, "overloaded_error"},
    {"internal_error", 500, "internal_error"},
}};

}  // namespace

std::string_view to_string(outcome o) {
  return infos[static_cast<std::size_t>(o)].name;
}

std::optional<outcome> outcome_from_string(std::string_view name) {
  for (std::size_t i = 0; i < infos.size(); ++i) {
    if (infos[i].name == name) return static_cast<outcome>(i);
  }
  return std::nullopt;
}

int status_of(outcome o) {
  return infos[static_cast<std::size_t>(o)].status;
}

std::string_view error_type_of(outcome o) {
  return infos[static_cast<std::size_t>(o)].type;
}

// Written directly rather than through a boost::json DOM: it is on the deadline's path, where a
// burst of expiries is answered one after another on one io thread, and a DOM costs each answer
// far more than this does.
std::string error_body(outcome o, std::string_view message, std::string_view request_id) {
  return error_body(o, error_type_of(o), message, request_id);
}

std::string error_body(outcome o, std::string_view type, std::string_view message,
                       std::string_view request_id) {
  const auto code = to_string(o);
  std::string out;
  // Room for each string's most (every character escaped): append_json_string sizes the buffer
  // to that before it writes, and a smaller reservation cost a reallocation per piece.
  out.reserve(56 + json_string_max(message.size()) + json_string_max(type.size()) +
              json_string_max(code.size()) + json_string_max(request_id.size()));
  out += R"({"error":{"message":)";
  append_json_string(out, message);
  out += R"(,"type":)";
  append_json_string(out, type);
  out += R"(,"code":)";
  append_json_string(out, code);
  out += R"(,"request_id":)";
  append_json_string(out, request_id);
  out += "}}";
  return out;
}

}  // namespace tether
