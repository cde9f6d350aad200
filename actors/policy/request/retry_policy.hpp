// What to do after an attempt ended without a response that can go to the caller as it is.
// Envoy's router split: the attempt reports facts, this class decides late.
// Pure: the random source is injected so tests can pin the jitter.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>

#include "actors/policy/request/outcome.hpp"

namespace tether {

using millis = std::chrono::milliseconds;

// How one attempt ended, as far as retrying is concerned.
enum class attempt_end {
  response,        // a complete upstream response with `status`
  connect_failed,  // refused, unresolvable, connect or TLS failure
  reset,           // connection broke before the response was complete
  malformed,       // not HTTP, or a body we could not accept
  timeout,         // the attempt timeout fired before the response was committed
  too_large,       // non-streaming body over request.max_response_bytes
  overloaded,      // the budget refused a slot (queue full or wait limit)
  shutting_down,   // the budget refused a slot: this node's drain has ended
  too_heavy,       // the budget refused a slot: the upstream's token cap can never hold it
  // A pooled connection the upstream had closed before it could read the request: sent again
  // on a new connection by the lifecycle, never judged by this policy.
  stale_connection,
};

struct attempt_report {
  attempt_end end = attempt_end::response;
  int status = 0;                     // for `response`
  std::optional<millis> retry_after;  // parsed Retry-After of a 429/503
  bool committed = false;             // a response byte already reached the caller
};

struct retry_decision {
  enum class action {
    pass_through,  // send the upstream response as it is (2xx, 4xx)
    retry,         // same model again after `delay`
    fallback,      // this model is spent: next model in the chain
    fail,          // end the request with `result`
  } what = action::fail;
  millis delay{0};
  outcome result = outcome::upstream_failed;
  std::optional<millis> retry_after;  // to pass on with a 429
};

class retry_policy {
 public:
  // uniform(0, n) → a value in [0, n]; defaults to a thread-local engine.
  using jitter_source = std::function<std::int64_t(std::int64_t)>;

  retry_policy(std::uint32_t max_retries, millis backoff_base, jitter_source jitter = {});

  // `attempt_index` counts the model's attempts so far (0 for the first); `remaining` is the
  // request's deadline left (nullopt = unbounded); `has_fallback` whether a next model exists.
  retry_decision decide(const attempt_report& report, std::uint32_t attempt_index,
                        std::optional<millis> remaining, bool has_fallback);

  // Exponential backoff with full jitter: uniform(0, base * 2^retry_index), capped.
  millis backoff(std::uint32_t retry_index);

  // The outcome when every attempt of the whole chain failed: upstream_timeout only if every
  // attempt timed out, upstream_rate_limited only if every attempt was a 429.
  struct history {
    std::uint32_t attempts = 0;
    std::uint32_t timeouts = 0;
    std::uint32_t rate_limited = 0;
    void record(const attempt_report& r);
    outcome exhausted_outcome() const;
  };

 private:
  std::uint32_t max_retries_;
  millis backoff_base_;
  jitter_source jitter_;
};

bool is_retryable(const attempt_report& report);
// Retry-After as delta-seconds (HTTP-dates are rare from model servers and are ignored).
std::optional<millis> parse_retry_after(const std::string* value);

}  // namespace tether
