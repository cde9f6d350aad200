// An engine's metrics text (actors/policy/engine/engine_metrics.hpp), read for each engine's
// series. Beyond "no crash": every count is a whole number within [0, max_engine_requests]; comment
// lines put before the text change nothing; a well-formed sample of the running series appended on
// a line of its own makes any text within the size cap readable.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "actors/policy/engine/engine_metrics.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {

bool same(const std::optional<tether::engine_counts>& a,
          const std::optional<tether::engine_counts>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || (a->running == b->running && a->queued == b->queued);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  using tether::config::engine_kind;
  for (auto kind : {engine_kind::llamacpp, engine_kind::vllm, engine_kind::sglang}) {
    tether::config::upstream_config u;
    u.engine = kind;
    const auto series = tether::series_of(u);
    const auto counts = tether::read_engine_counts(text, series);
    if (counts) {
      TETHER_FUZZ_CHECK(counts->running >= 0 && counts->running <= tether::max_engine_requests);
      TETHER_FUZZ_CHECK(counts->queued >= 0 && counts->queued <= tether::max_engine_requests);
    }
    const std::string commented =
        "# HELP " + series.running + " x\n# TYPE x gauge\n" + std::string(text);
    if (commented.size() <= tether::max_engine_metrics_bytes)
      TETHER_FUZZ_CHECK(same(tether::read_engine_counts(commented, series), counts));
    std::string appended(text);
    appended += "\n" + series.running + " 1\n";
    if (appended.size() <= tether::max_engine_metrics_bytes)
      TETHER_FUZZ_CHECK(tether::read_engine_counts(appended, series).has_value());
  }
  return 0;
}
