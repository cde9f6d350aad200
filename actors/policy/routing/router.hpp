// Which deployment serves an attempt: among the model's deployments (several [[models]] entries
// with one name) on upstreams in service, two drawn at random in proportion to their upstream's
// weight and the one with less live work per weight taken (P2C); a retry prefers one not tried
// yet; with none in service, the same choice among them all. A model with routing = "prefix"
// places a request's first attempt by its affinity key on the model's ring instead
// (actors/policy/routing/prefix_ring.hpp). Read-only once built (a reload builds a new router,
// and with it the rings): the live work and the health are upstream_health's.
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

#include "actors/policy/routing/prefix_ring.hpp"
#include "actors/policy/routing/route_kind.hpp"
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
  std::uint64_t identity = 0;  // its upstream's name and upstream_model, hashed: its ring points
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
  route_kind route = route_kind::none;  // on a model with routing = "prefix": how it was chosen
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
  // Only deployments serving `where` and not `excluded` are candidates. `affinity`: the
  // request's affinity key; on a model with routing = "prefix", an attempt with nothing tried
  // yet and deployments in service goes to the first on the key's ring path whose live work
  // stays within the load bound (a retry leaves it by the usual choice among the untried).
  route_choice choose(const std::string& model, surface where, std::span<const std::size_t> tried,
                      const upstream_health& health, std::chrono::steady_clock::time_point now,
                      std::uint64_t random, std::span<const std::size_t> excluded = {},
                      std::optional<std::uint64_t> affinity = std::nullopt) const;
  // How many bytes of the canonical prompt make the affinity key of a request for `model`: the
  // prefix_bytes of the first model with routing = "prefix" in its chain; nullopt when none has
  // it (no key is computed: the request costs nothing more).
  std::optional<std::uint32_t> affinity_bytes(const std::string& model) const {
    if (key_bytes_.empty()) return std::nullopt;
    auto it = key_bytes_.find(model);
    if (it == key_bytes_.end()) return std::nullopt;
    return it->second;
  }
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
  struct prefix_routing {
    double load_factor = 1.25;
    prefix_ring ring;
  };
  // The models with routing = "prefix", and the models whose chain has one (the bytes its key
  // reads).
  std::unordered_map<std::string, prefix_routing> prefix_;
  std::unordered_map<std::string, std::uint32_t> key_bytes_;
};

// 64 random bits from this thread's generator (seeded once per thread), for router::choose.
std::uint64_t route_random();

}  // namespace tether
