// A model's optional prices (contract: "The ledger": price_input_per_mtok,
// price_output_per_mtok, price_cached_input_per_mtok, USD per million tokens) and the spend they
// make of a request's tokens. Spend is in billionths of a dollar (usage_record::spend_nanousd).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "actors/policy/ledger/usage_record.hpp"
#include "config/config.hpp"

namespace tether::ledger {

struct model_price {
  std::optional<double> input_per_mtok{};
  std::optional<double> output_per_mtok{};
  // Unset: cached prompt tokens cost the input price (a provider without a cache discount).
  std::optional<double> cached_input_per_mtok{};
  bool priced() const { return input_per_mtok || output_per_mtok || cached_input_per_mtok; }
  bool operator==(const model_price&) const = default;
};

// Rounded to the nearest billionth, saturating; a price that is unset, negative or not a number
// costs nothing.
std::uint64_t usd_to_nanousd(double usd);

// The prompt's uncached part at the input price, its cached part at the cached price, the
// completion at the output price. Waste costs the key nothing (usage_totals::billed_tokens).
std::uint64_t spend_of(const usage_record& r, const model_price& price);

// The prices of the deployment of `model` on `upstream` (a [[models]] entry), if it has any.
std::optional<model_price> price_of(const config::gateway_config& cfg, std::string_view model,
                                    std::string_view upstream);

}  // namespace tether::ledger
