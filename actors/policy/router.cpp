#include "actors/policy/router.hpp"

#include <algorithm>
#include <limits>

namespace tether {

router::router(const config::gateway_config& cfg) {
  for (const auto& m : cfg.models) {
    deployment d;
    d.index = deployments_.size();
    d.model = m.name;
    for (std::size_t u = 0; u < cfg.upstreams.size(); ++u) {
      if (cfg.upstreams[u].name == m.upstream) d.upstream = u;
    }
    d.upstream_model = m.upstream_model.empty() ? m.name : m.upstream_model;
    if (!by_model_.count(m.name)) {
      public_models_.push_back(m.name);
      fallbacks_[m.name] = m.fallbacks;
    }
    by_model_[m.name].push_back(d.index);
    deployments_.push_back(std::move(d));
  }
  in_flight_ = std::make_unique<std::atomic<int>[]>(deployments_.size());
  for (std::size_t i = 0; i < deployments_.size(); ++i) in_flight_[i].store(0);
  for (const auto& model : public_models_) {
    auto& chain = chains_[model];
    std::vector<std::string> stack{model};
    while (!stack.empty()) {
      auto m = stack.back();
      stack.pop_back();
      if (std::find(chain.begin(), chain.end(), m) != chain.end()) continue;
      chain.push_back(m);
      const auto& fb = fallbacks_of(m);
      for (auto it = fb.rbegin(); it != fb.rend(); ++it) stack.push_back(*it);
    }
  }
}

const std::vector<std::string>& router::chain_of(const std::string& model) const {
  static const std::vector<std::string> none;
  auto it = chains_.find(model);
  return it == chains_.end() ? none : it->second;
}

const std::vector<std::string>& router::fallbacks_of(const std::string& model) const {
  static const std::vector<std::string> none;
  auto it = fallbacks_.find(model);
  return it == fallbacks_.end() ? none : it->second;
}

std::string router::describe(const config::gateway_config& cfg) const {
  std::string out;
  for (const auto& model : public_models_) {
    out += "route " + model + ": deployments ";
    const auto& deps = by_model_.at(model);
    for (std::size_t i = 0; i < deps.size(); ++i) {
      const auto& d = deployments_[deps[i]];
      if (i > 0) out += ", ";
      out += cfg.upstreams.at(d.upstream).name + " (" + d.upstream_model + ")";
    }
    // Every deployment speaks the OpenAI API today, so every model serves the same surfaces.
    out += "; surfaces chat, completions, embeddings; tries ";
    const auto& chain = chain_of(model);
    for (std::size_t i = 0; i < chain.size(); ++i) {
      if (i > 0) out += " -> ";
      out += chain[i];
    }
    out += "\n";
  }
  return out;
}

std::optional<std::size_t> router::choose(const std::string& model,
                                          std::span<const std::size_t> tried) const {
  auto it = by_model_.find(model);
  if (it == by_model_.end() || it->second.empty()) return std::nullopt;
  const auto& candidates = it->second;
  auto start = rotation_.fetch_add(1) % candidates.size();
  std::optional<std::size_t> best;
  int best_load = std::numeric_limits<int>::max();
  bool best_untried = false;
  for (std::size_t k = 0; k < candidates.size(); ++k) {
    auto idx = candidates[(start + k) % candidates.size()];
    bool untried = std::find(tried.begin(), tried.end(), idx) == tried.end();
    int load = in_flight_[idx].load();
    // Not-yet-tried beats tried; then fewest in flight; ties keep the rotated order.
    if (!best || (untried && !best_untried) || (untried == best_untried && load < best_load)) {
      best = idx;
      best_load = load;
      best_untried = untried;
    }
  }
  return best;
}

}  // namespace tether
