// What an engine's own Prometheus text says of its work: how many requests it is running and how
// many it queues, read from the series its engine names (or the upstream's overrides). Pure: the
// metrics poll (actors/engine_metrics_actor.cpp) hands it the body it read, whatever the engine
// sent, so nothing in the text can make it fail other than by saying "not found".
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.hpp"

namespace tether {

// A metrics body longer than this is not read: the poll cancels it. vLLM's, with its histograms
// for many models, is a few hundred KiB; llama.cpp's under 2 KiB.
constexpr std::size_t max_engine_metrics_bytes = 4u << 20;

struct engine_series {
  std::string running;  // "" = unknown: nothing to read
  std::string queued;   // "" = the engine queues nothing it reports
};

// The engine's own names, replaced by the upstream's metrics_running_series /
// metrics_queued_series where set. engine = "openai" knows none.
engine_series series_of(const config::upstream_config& u);

struct engine_counts {
  std::int64_t running = 0;
  std::int64_t queued = 0;
};

// Sums every sample of each series (one per label set: vLLM labels by model_name) and rounds it
// to a whole count. nullopt when the running series has no sample (the wrong engine, the wrong
// path, a text that is not Prometheus): the poll then knows nothing. A queued series that is
// absent reads 0. Samples that are not finite non-negative numbers are ignored; a sum is capped
// at max_engine_requests. Lines are read as the text exposition format has them: `name`,
// optionally `{labels}` (quoted values may hold any byte, `\"` escaped), a value, an optional
// timestamp; comments and anything else are skipped.
std::optional<engine_counts> read_engine_counts(std::string_view text, const engine_series& series);

constexpr std::int64_t max_engine_requests = 1'000'000'000;

}  // namespace tether
