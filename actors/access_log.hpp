// One line per model request at its end, with three timelines: the caller's (ttfb, caller_left,
// duration), the gateway's (queue wait, attempts) and the upstream work's (work_ended).
// Never a prompt, a completion, a key or an Authorization value: the record has no field for them.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "actors/policy/request/outcome.hpp"

namespace tether {

struct attempt_record {
  std::string upstream;
  std::string model;  // the upstream model
  std::optional<int> status;
  outcome result = outcome::ok;
  double start_ms = 0;
  std::optional<double> head_ms;  // the upstream's response head arrived; nullopt: it never did
  std::optional<double> end_ms;
  // The budget slot went back: the connection's close, or a cut attempt's release grace later.
  std::optional<double> engine_released_ms;
  // Its pooled connection was closed by the upstream before it could read the request: logged
  // as outcome "stale_connection" (an attempt's, never a request's), and sent again.
  bool stale_connection = false;
};

// Written at once by write_access_log: the strings and attempts are the caller's, viewed, not
// copied (a copy allocated several times per request).
struct access_record {
  std::string_view request_id;
  std::string_view model;
  std::string_view path;
  bool stream = false;
  outcome result = outcome::ok;
  int status = 0;
  std::optional<double> deadline_ms;
  double queue_wait_ms = 0;
  std::optional<double> ttfb_ms;
  double duration_ms = 0;
  std::optional<double> caller_left_ms;
  std::optional<double> work_ended_ms;
  std::optional<double> cancel_latency_ms;
  // The SDK's own retry counter (x-stainless-retry-count): one user call's tries, seen together.
  std::optional<std::int64_t> client_retry;
  // The client's session header (x-claude-code-session-id, session-id, x-client-request-id), and
  // which try of its call this request is (1: the first; nullopt: no call the gateway can tell).
  std::optional<std::string_view> client_session;
  std::optional<std::uint32_t> call_try;
  std::optional<std::string_view> key;  // the gateway key's name; nullopt: no key
  // What the upstream reported using (usage); nullopt: not reported.
  std::optional<std::uint64_t> prompt_tokens;
  std::optional<std::uint64_t> completion_tokens;
  std::optional<std::uint64_t> cached_tokens;  // the part of the prompt read from a cache
  std::span<const attempt_record> attempts;
};

// Configures the process logger once: "json" (one JSON object per line) or "text".
void setup_logging(const std::string& format, const std::string& level);
// A reload's new telemetry.log_level (thread-safe).
void set_log_level(const std::string& level);

void write_access_log(const access_record& r);
// The line write_access_log writes in the json format.
std::string format_access_line(const access_record& r);

// Operational messages (start, stop, config, errors) in the configured format.
void log_info(const std::string& message);
void log_warn(const std::string& message);
void log_error(const std::string& message);

}  // namespace tether
