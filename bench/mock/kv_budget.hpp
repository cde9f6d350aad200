// mock-kv-<budget>-<ms>: a model server's KV cache as a token budget. Each request's demand is
// what tether's token weight estimates (actors/policy/admission/token_weight.hpp: body bytes / 4
// plus the output limit it names, else 1024), so a bench can compare what tether admitted with what
// the server could hold, exactly. Not thread-safe: the mock runs one io thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>

#include <boost/json/object.hpp>

namespace tether::mock {

// The output part of a demand when the request names no limit: tether's default_max_tokens.
inline constexpr std::uint64_t kv_default_max_tokens = 1024;

// The largest of the body's top-level max_tokens, max_completion_tokens and max_output_tokens
// that is a non-negative integer, as tether reads them; nullopt when there is none.
std::optional<std::uint64_t> requested_output_limit(const boost::json::object& body);

// body_bytes / 4 + (max_output, else kv_default_max_tokens), saturating.
std::uint64_t kv_demand(std::size_t body_bytes, std::optional<std::uint64_t> max_output);

// The KV tokens held per budget (one book per budget value, process-wide) and what arrived.
class kv_books {
 public:
  // Holds `demand` in the book of `budget` and returns true when it fits beside what that book
  // holds; otherwise counts the arrival as over budget and holds nothing.
  bool try_hold(std::uint64_t budget, std::uint64_t demand);
  // Gives back a demand try_hold took.
  void release(std::uint64_t budget, std::uint64_t demand);
  // Zeroes the counters; the peaks restart from what is held now.
  void reset();

  std::uint64_t admitted() const { return admitted_; }
  std::uint64_t over_budget() const { return over_budget_; }
  // The most tokens one book held at once (never above its budget).
  std::uint64_t peak_tokens() const { return peak_tokens_; }
  // The most tokens one book was asked to hold at once: what it held plus an arrival's demand,
  // admitted or not. Above the budget exactly when an arrival was over budget.
  std::uint64_t peak_demand_tokens() const { return peak_demand_tokens_; }
  // Held now, over every book.
  std::uint64_t tokens_in_flight() const;

 private:
  std::unordered_map<std::uint64_t, std::uint64_t> held_;  // budget -> tokens held
  std::uint64_t admitted_ = 0;
  std::uint64_t over_budget_ = 0;
  std::uint64_t peak_tokens_ = 0;
  std::uint64_t peak_demand_tokens_ = 0;
};

}  // namespace tether::mock
