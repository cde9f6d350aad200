// Scenario 9's workload and nodes (issue #30): a closed loop of mostly short requests and a few
// very long ones against tether-mock's KV budget model (mock-kv-<budget>-<ms>), through a node
// that caps the upstream's tokens in flight at the mock's budget and through one that caps its
// requests in flight at what the mix's mean weight suggests. The mix is a fixed function of the
// request's position, so both nodes are sent the same sequence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tether::bench {

struct token_mix {
  // The mock's KV cache, and how long each admitted request holds its share of it.
  static constexpr std::uint64_t budget_tokens = 16384;
  static constexpr unsigned hold_ms = 100;
  static constexpr const char* model = "mock-kv-16384-100";
  // Short requests ask for one of these; one in long_one_in asks for long_max_tokens, so three
  // long ones in flight are more than the budget, two with the usual shorts are not.
  static constexpr std::uint64_t short_max_tokens[] = {64, 128, 256};
  static constexpr std::uint64_t long_max_tokens = 6000;
  static constexpr unsigned long_one_in = 8;
  static constexpr unsigned callers = 24;
};

// Which of scenario 9's nodes a config is for.
enum class token_node { tokens, slots };

// The max_tokens of request k (from 0) of the mix.
std::uint64_t token_mix_max_tokens(std::size_t k);
bool token_mix_is_long(std::size_t k);
// The body of a mix request asking for max_tokens.
std::string token_mix_body(std::uint64_t max_tokens);
// Its token weight as tether and the mock compute it: body bytes / 4 + max_tokens.
std::uint64_t token_mix_weight(std::uint64_t max_tokens);
// The expected weight of a mix request.
double token_mix_mean_weight();
// The request-count cap an operator without token weighting would pick: the budget over the
// mean weight, rounded.
unsigned token_mix_slot_cap();

// A node for scenario 9: token_mix::model (and the warm-up model, bench_models::immediate) on
// one upstream, the mock, with max_tokens_in_flight = the budget (`tokens`; its request cap far
// above the callers) or max_in_flight = token_mix_slot_cap() (`slots`). No retries and no
// ejection: each request is one attempt, so the mock's over-budget count is the requests it
// could not hold.
std::string token_budget_config(const std::string& listen, const std::string& mock,
                                token_node node);

}  // namespace tether::bench
