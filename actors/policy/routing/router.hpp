// Which deployment serves an attempt: among the model's deployments (several [[models]] entries
// with one name) on upstreams in service, two drawn at random in proportion to their upstream's
// weight and the one with less live work per weight taken (P2C); a retry prefers one not tried
// yet; with none in service, the same choice among them all. Read-only once built: the live work
// and the health are upstream_health's.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"

namespace tether {

class upstream_health;

struct deployment {
  std::size_t index = 0;
  std::string model;                        // public name
  std::size_t upstream = 0;                 // index into gateway_config::upstreams
  std::string upstream_model;               // what the upstream is sent
  surface_set serves = 0;                   // its upstream's surfaces
  std::uint32_t default_max_tokens = 1024;  // the output weight when a request names none
  std::uint64_t token_cap = 0;              // its upstream's max_tokens_in_flight, 0 = none
};

// A request too heavy for every deployment that could serve it: its weight on the deployment
// with the largest token cap, and that cap.
struct token_overweight {
  std::uint64_t weight = 0;
  std::uint64_t cap = 0;
};

struct route_choice {
  std::optional<std::size_t> deployment;  // nullopt: the model has no deployment
  // false: every deployment's upstream is out of service; `deployment` is then chosen among them
  // all as usual (an untried one first), and `available_at` is when the first comes back.
  bool healthy = true;
  std::chrono::steady_clock::time_point available_at{};
};

class router {
 public:
  explicit router(const config::gateway_config& cfg);

  bool knows(const std::string& model) const { return by_model_.count(model) > 0; }
  // Whether some deployment of the model serves the surface.
  bool serves(const std::string& model, surface s) const;
  // Public model names in configuration order, each once.
  const std::vector<std::string>& public_models() const { return public_models_; }
  const std::vector<std::string>& fallbacks_of(const std::string& model) const;
  // The model, then its fallbacks depth-first, each model once (config rejects cycles): what a
  // request for `model` may try, in order. Computed once, at construction; empty if unknown.
  const std::vector<std::string>& chain_of(const std::string& model) const;
  const deployment& at(std::size_t index) const { return deployments_[index]; }
  std::size_t size() const { return deployments_.size(); }

  // Each public model's route, one line each, for `tether check`: its deployments (upstream and
  // the model name sent there), the surfaces it serves, and the chain a request may try.
  std::string describe(const config::gateway_config& cfg) const;

  // `random`: 64 random bits, for the two draws.
  // Only deployments serving `where` and not `excluded` are candidates.
  route_choice choose(const std::string& model, surface where, std::span<const std::size_t> tried,
                      const upstream_health& health, std::chrono::steady_clock::time_point now,
                      std::uint64_t random, std::span<const std::size_t> excluded = {}) const;
  // The model's deployment serving `where` on that upstream, if it has one (the first, should
  // there be several).
  std::optional<std::size_t> deployment_on(const std::string& model, surface where,
                                           std::size_t upstream) const;
  // nullopt when some deployment of the model serving `where` can hold a request of that many
  // prompt tokens and that output limit (no token cap, or a cap its weight fits under).
  std::optional<token_overweight> too_heavy(const std::string& model, surface where,
                                            std::uint64_t prompt_tokens,
                                            std::optional<std::uint64_t> max_output) const;
  // The default_max_tokens of the model's first deployment serving `where` (1024 if none).
  std::uint32_t default_max_tokens(const std::string& model, surface where) const;
  // Whether any deployment of the model serving `where` has its upstream in service at `now`.
  bool any_in_service(const std::string& model, surface where, const upstream_health& health,
                      std::chrono::steady_clock::time_point now) const;

 private:
  std::vector<deployment> deployments_;
  // Hashed: a request looks its model up several times (serves, chain_of, choose).
  std::unordered_map<std::string, std::vector<std::size_t>> by_model_;
  bool any_token_cap_ = false;
  std::unordered_map<std::string, std::vector<std::string>> fallbacks_;
  std::unordered_map<std::string, std::vector<std::string>> chains_;
  std::vector<std::string> public_models_;
};

// 64 random bits from this thread's generator (seeded once per thread), for router::choose.
std::uint64_t route_random();

}  // namespace tether
