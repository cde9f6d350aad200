#include "actors/policy/request/retry_policy.hpp"

#include <algorithm>
#include <random>
#include <string>

namespace tether {

namespace {
constexpr millis max_backoff{30000};

// Full jitter over [1, n] ms: a retry always waits on a timer, never goes out in the same
// moment as the failure it answers (a draw of 0 did, one time in n + 1).
std::int64_t default_jitter(std::int64_t n) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::uniform_int_distribution<std::int64_t>{1, n}(rng);
}
}  // namespace

retry_policy::retry_policy(std::uint32_t max_retries, millis backoff_base, jitter_source jitter)
    : max_retries_(max_retries),
      backoff_base_(backoff_base),
      jitter_(jitter ? std::move(jitter) : jitter_source{default_jitter}) {}

bool is_retryable(const attempt_report& r) {
  if (r.committed) return false;
  switch (r.end) {
    case attempt_end::connect_failed:
    case attempt_end::reset:
    case attempt_end::malformed:
    case attempt_end::timeout:
      return true;
    case attempt_end::response:
      return r.status == 429 || r.status == 502 || r.status == 503 || r.status == 504;
    case attempt_end::too_large:
    case attempt_end::overloaded:
    case attempt_end::shutting_down:
    case attempt_end::too_heavy:
    case attempt_end::stale_connection:
      return false;
  }
  return false;
}

millis retry_policy::backoff(std::uint32_t retry_index) {
  auto ceiling = backoff_base_;
  for (std::uint32_t i = 0; i < retry_index && ceiling < max_backoff; ++i) ceiling *= 2;
  ceiling = std::min(ceiling, max_backoff);
  if (ceiling.count() <= 0) return millis{0};
  return millis{jitter_(ceiling.count())};
}

retry_decision retry_policy::decide(const attempt_report& r, std::uint32_t attempt_index,
                                    std::optional<millis> remaining, bool has_fallback) {
  retry_decision d;
  using act = retry_decision::action;
  if (r.end == attempt_end::response && r.status >= 200 && r.status < 300) {
    d.what = act::pass_through;
    d.result = outcome::ok;
    return d;
  }
  if (r.end == attempt_end::response && r.status >= 400 && r.status < 500 && r.status != 429) {
    // The caller's request is wrong for this upstream; another try or model will not fix it.
    d.what = act::pass_through;
    d.result = outcome::upstream_rejected;
    return d;
  }
  if (r.end == attempt_end::too_heavy) {
    // This upstream's token cap can never hold the request, but another's may: the chain goes
    // on. At its end the gateway could not place it: overloaded, as the refused attempt was.
    d.what = has_fallback ? act::fallback : act::fail;
    d.result = outcome::overloaded;
    return d;
  }
  if (r.end == attempt_end::overloaded || r.end == attempt_end::shutting_down) {
    // The gateway's own no: another upstream or model would be refused by the same budget.
    d.what = act::fail;
    d.result = r.end == attempt_end::overloaded ? outcome::overloaded : outcome::shutting_down;
    return d;
  }
  if (r.end == attempt_end::response && r.status == 429 && r.retry_after && remaining &&
      *r.retry_after > *remaining) {
    // Waiting as the upstream asks would outlive the caller's budget: say so now.
    d.what = act::fail;
    d.result = outcome::upstream_rate_limited;
    d.retry_after = r.retry_after;
    return d;
  }
  if (is_retryable(r) && attempt_index < max_retries_) {
    d.what = act::retry;
    d.delay = backoff(attempt_index);
    if (r.end == attempt_end::response && r.status == 429 && r.retry_after) {
      d.delay = std::max(d.delay, *r.retry_after);
    }
    return d;
  }
  if (r.committed || r.end == attempt_end::too_large) {
    d.what = act::fail;
    d.result = r.committed ? outcome::stream_interrupted : outcome::upstream_failed;
    return d;
  }
  if (has_fallback) {
    d.what = act::fallback;
    return d;
  }
  d.what = act::fail;
  d.result = outcome::upstream_failed;  // refined by history::exhausted_outcome by the caller
  if (r.end == attempt_end::response && r.status == 429) d.retry_after = r.retry_after;
  return d;
}

void retry_policy::history::record(const attempt_report& r) {
  ++attempts;
  if (r.end == attempt_end::timeout) ++timeouts;
  if (r.end == attempt_end::response && r.status == 429) ++rate_limited;
}

outcome retry_policy::history::exhausted_outcome() const {
  if (attempts > 0 && timeouts == attempts) return outcome::upstream_timeout;
  if (attempts > 0 && rate_limited == attempts) return outcome::upstream_rate_limited;
  return outcome::upstream_failed;
}

std::optional<millis> parse_retry_after(const std::string* value) {
  if (value == nullptr || value->empty() || value->size() > 9) return std::nullopt;
  std::int64_t secs = 0;
  for (char c : *value) {
    if (c < '0' || c > '9') return std::nullopt;
    secs = secs * 10 + (c - '0');
  }
  return millis{secs * 1000};
}

}  // namespace tether
