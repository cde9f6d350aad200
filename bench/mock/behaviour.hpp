// What a requested model name asks the mock to do. Pure parsing: no sockets, no clocks.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tether::mock {

enum class behaviour_kind {
  immediate,  // mock
  delay,      // mock-delay-<ms>
  // mock-stream-<n>x<ms>, or mock-stream-stamped-<n>x<ms> (see behaviour::stamped), either
  // with -linger-<ms> (see behaviour::linger)
  stream,
  fail,        // mock-fail-<status>
  rate_limit,  // mock-ratelimit-<secs>
  hang,        // mock-hang
  flaky,       // mock-flaky-<percent>
  // Hostile upstreams (issue #8): each breaks HTTP or SSE in one specific way.
  bad_status,  // mock-badstatus: a garbage status line, then close
  garbage,     // mock-garbage: 200 application/json whose body is not JSON
  truncated,   // mock-truncated: Content-Length larger than the bytes sent, then close
  sse_cut,     // mock-sse-cut: a few events, then half an event, then close
  bad_chunk,   // mock-badchunk: a few events, then an invalid chunk, then close
  huge,        // mock-huge-<mb>: a 200 JSON body of that many MiB
  reset,       // mock-reset: a few events, then RST (SO_LINGER 0)
  drip,        // mock-drip-<ms>: the response body one byte every ms
  drop,        // mock-drop: reads the request, then RST without a byte of response
  // A server with a KV cache of that many tokens (bench/mock/kv_budget.hpp): a request whose
  // demand does not fit beside the ones at work is 503 at once, else answered after ms.
  kv,  // mock-kv-<budget_tokens>-<ms>
};

struct behaviour {
  behaviour_kind kind = behaviour_kind::immediate;
  std::chrono::milliseconds delay{0};     // delay: the wait; stream: the interval
  std::uint32_t chunks = 0;               // stream
  unsigned status = 0;                    // fail
  std::uint32_t retry_after_seconds = 0;  // rate_limit
  unsigned percent = 0;                   // flaky
  std::uint32_t mebibytes = 0;            // huge
  std::uint64_t kv_budget_tokens = 0;     // kv (its hold time is `delay`)
  // stream: each chat or completions event carries the moment the mock sent it, as the chunk's
  // `mock_sent_us` (epoch µs, the clock of /_stats' times), so a client can time the relay.
  bool stamped = false;
  // stream: the body stays open this long after the answer's last event before it ends, as a
  // server's can (llama-server writes chat's [DONE] and the body's end apart).
  std::chrono::milliseconds linger{0};
};

// How many whole events the broken streams (sse_cut, bad_chunk, reset) send before they break,
// and the gap before each of them and before the break: long enough that a relay has passed
// every event on before the failure reaches it.
constexpr std::uint32_t hostile_stream_events = 3;
constexpr std::chrono::milliseconds hostile_stream_interval{30};

// nullopt for a name the mock does not serve (answered 404 model_not_found).
std::optional<behaviour> parse_behaviour(std::string_view model);

// Request k (0-based) of a flaky model fails iff floor((k+1)p/100) > floor(kp/100): exactly p
// failures per 100 requests, spread evenly and reproducibly.
bool flaky_request_fails(std::uint64_t k, unsigned percent);

}  // namespace tether::mock
