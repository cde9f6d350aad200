// The closed outcome taxonomy of the contract: every model request ends in exactly one.
// The same name is the error body's `code`, the metric label, the span attribute and the log field.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tether {

enum class outcome {
  ok,
  upstream_rejected,
  upstream_rate_limited,
  upstream_failed,
  upstream_timeout,
  deadline_exceeded,
  stream_interrupted,
  client_disconnected,
  overloaded,
  rate_limited,
  budget_exhausted,
  headers_too_large,
  bad_request,
  unknown_model,
  unauthorized,
  forbidden,
  payload_too_large,
  shutting_down,
  internal_error,
};

inline constexpr int outcome_count = static_cast<int>(outcome::internal_error) + 1;

std::string_view to_string(outcome o);
std::optional<outcome> outcome_from_string(std::string_view name);

// The status the gateway sends for an outcome it produces itself. upstream_rejected passes the
// upstream's own status through, stream_interrupted has already sent 200, and
// client_disconnected is logged as 499 but never sent.
int status_of(outcome o);

// OpenAI's error `type` for the body.
std::string_view error_type_of(outcome o);

// {"error":{"message":…,"type":…,"code":<outcome>,"request_id":…}}
std::string error_body(outcome o, std::string_view message, std::string_view request_id);
// The same with another `type`: a mid-stream error names its cause there (timeout_error for
// the deadline or the idle timeout, upstream_error for an upstream that broke).
std::string error_body(outcome o, std::string_view type, std::string_view message,
                       std::string_view request_id);

}  // namespace tether
