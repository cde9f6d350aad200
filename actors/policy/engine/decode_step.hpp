// The observed decode step of one deployment: how long its engine takes to produce one token of
// a stream, from the gaps between the token events tether relays. What a step is: one SSE event
// of a 2xx stream that carries data other than `[DONE]` (an engine writes one per token it
// decodes). The gap before a stream's first event is the prompt's prefill, not a step, and is
// never a sample; a gap that brought several events (one upstream read) counts as that many
// steps of equal length.
//
// Smoothed as TCP smooths its round-trip time (RFC 6298): s += (sample - s) / 8, the first sample
// taken as it is; one eighth follows a change of the engine's load within a few tokens while one
// late read moves it little. Shared by the attempts of every io thread without a lock: a load and
// a store, relaxed; two attempts that update at once may lose one sample, which a smoothed value
// does not miss.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tether {

class decode_step {
 public:
  using duration = std::chrono::nanoseconds;

  // `events` token events came `gap` after the previous one.
  void observe(duration gap, std::size_t events);

  // The smoothed step; nullopt before the first sample.
  std::optional<duration> current() const;

 private:
  std::atomic<std::int64_t> smoothed_ns_{0};  // 0: no sample yet
};

// Whether one SSE event is a token event (a decode step): it carries data other than [DONE].
// Comments, ids and retry lines alone are not tokens.
bool is_token_event(std::string_view event);

}  // namespace tether
