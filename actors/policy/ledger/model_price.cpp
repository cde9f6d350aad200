#include "actors/policy/ledger/model_price.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tether::ledger {

namespace {

// Billionths of a dollar per token at `per_mtok` dollars per million tokens.
double nanousd_per_token(std::optional<double> per_mtok) {
  if (!per_mtok || !(*per_mtok > 0)) return 0;
  return *per_mtok * 1000.0;
}

std::uint64_t saturate(double nano) {
  if (!(nano > 0)) return 0;
  // 2^64 as a double; anything at or past it is the most a counter holds.
  constexpr double most = 18446744073709551616.0;
  if (nano >= most) return std::numeric_limits<std::uint64_t>::max();
  return static_cast<std::uint64_t>(std::round(nano));
}

}  // namespace

std::uint64_t usd_to_nanousd(double usd) {
  if (!(usd > 0)) return 0;
  return saturate(usd * 1e9);
}

std::uint64_t spend_of(const usage_record& r, const model_price& price) {
  const auto cached = std::min(r.cached, r.prompt);
  const auto input = nanousd_per_token(price.input_per_mtok);
  const auto cached_rate =
      price.cached_input_per_mtok ? nanousd_per_token(price.cached_input_per_mtok) : input;
  const double nano = static_cast<double>(r.prompt - cached) * input +
                      static_cast<double>(cached) * cached_rate +
                      static_cast<double>(r.completion) * nanousd_per_token(price.output_per_mtok);
  return saturate(nano);
}

std::optional<model_price> price_of(const config::gateway_config& cfg, std::string_view model,
                                    std::string_view upstream) {
  for (const auto& m : cfg.models) {
    if (m.name != model || m.upstream != upstream) continue;
    const model_price p{m.price_input_per_mtok, m.price_output_per_mtok,
                        m.price_cached_input_per_mtok};
    if (p.priced()) return p;
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace tether::ledger
