// Which deployment serves an attempt: the model's deployments (several [[models]] entries with
// one name), fewest attempts in flight first, ties rotated, and a retry prefers one not tried yet.
// Thread-safe: in-flight counts are atomics shared by every request actor.
#pragma once

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace tether {

struct deployment {
  std::size_t index = 0;
  std::string model;           // public name
  std::size_t upstream = 0;    // index into gateway_config::upstreams
  std::string upstream_model;  // what the upstream is sent
};

class router {
 public:
  explicit router(const config::gateway_config& cfg);

  bool knows(const std::string& model) const { return by_model_.count(model) > 0; }
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

  std::optional<std::size_t> choose(const std::string& model,
                                    std::span<const std::size_t> tried) const;
  void attempt_started(std::size_t index) { in_flight_[index].fetch_add(1); }
  void attempt_ended(std::size_t index) { in_flight_[index].fetch_sub(1); }
  int in_flight(std::size_t index) const { return in_flight_[index].load(); }

 private:
  std::vector<deployment> deployments_;
  std::map<std::string, std::vector<std::size_t>> by_model_;
  std::map<std::string, std::vector<std::string>> fallbacks_;
  std::map<std::string, std::vector<std::string>> chains_;
  std::vector<std::string> public_models_;
  std::unique_ptr<std::atomic<int>[]> in_flight_;
  mutable std::atomic<std::size_t> rotation_{0};
};

}  // namespace tether
