// What a requested model name asks the mock to do. Pure parsing: no sockets, no clocks.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tether::mock {

enum class behaviour_kind {
  immediate,   // mock
  delay,       // mock-delay-<ms>
  stream,      // mock-stream-<n>x<ms>
  fail,        // mock-fail-<status>
  rate_limit,  // mock-ratelimit-<secs>
  hang,        // mock-hang
  flaky,       // mock-flaky-<percent>
};

struct behaviour {
  behaviour_kind kind = behaviour_kind::immediate;
  std::chrono::milliseconds delay{0};     // delay: the wait; stream: the interval
  std::uint32_t chunks = 0;               // stream
  unsigned status = 0;                    // fail
  std::uint32_t retry_after_seconds = 0;  // rate_limit
  unsigned percent = 0;                   // flaky
};

// nullopt for a name the mock does not serve (answered 404 model_not_found).
std::optional<behaviour> parse_behaviour(std::string_view model);

// Request k (0-based) of a flaky model fails iff floor((k+1)p/100) > floor(kp/100): exactly p
// failures per 100 requests, spread evenly and reproducibly.
bool flaky_request_fails(std::uint64_t k, unsigned percent);

}  // namespace tether::mock
