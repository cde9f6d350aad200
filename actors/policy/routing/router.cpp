#include "actors/policy/routing/router.hpp"

#include <algorithm>
#include <random>

#include <boost/container/small_vector.hpp>

#include "actors/policy/admission/token_weight.hpp"
#include "actors/policy/routing/upstream_health.hpp"

namespace tether {

router::router(const config::gateway_config& cfg) {
  for (const auto& m : cfg.models) {
    deployment d;
    d.index = deployments_.size();
    d.model = m.name;
    for (std::size_t u = 0; u < cfg.upstreams.size(); ++u) {
      if (cfg.upstreams[u].name == m.upstream) d.upstream = u;
    }
    d.serves = cfg.upstreams.at(d.upstream).surfaces;
    d.upstream_model = m.upstream_model.empty() ? m.name : m.upstream_model;
    d.default_max_tokens = m.default_max_tokens;
    d.token_cap = cfg.upstreams.at(d.upstream).max_tokens_in_flight;
    d.identity = hash_bytes(cfg.upstreams.at(d.upstream).name + '\0' + d.upstream_model);
    any_token_cap_ = any_token_cap_ || d.token_cap > 0;
    if (!by_model_.count(m.name)) {
      public_models_.push_back(m.name);
      fallbacks_[m.name] = m.fallbacks;
    }
    by_model_[m.name].push_back(d.index);
    deployments_.push_back(std::move(d));
  }
  // The loader makes a model's deployments agree on routing: the first entry speaks for all.
  for (const auto& m : cfg.models) {
    if (m.routing != config::routing_mode::prefix || prefix_.count(m.name)) continue;
    std::vector<prefix_ring::member> members;
    for (auto idx : by_model_.at(m.name)) {
      const auto& d = deployments_[idx];
      members.push_back({idx, d.identity, cfg.upstreams.at(d.upstream).weight});
    }
    prefix_.emplace(m.name, prefix_routing{m.prefix_load_factor, prefix_ring{members}});
  }
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
    for (const auto& m : chain) {
      const auto& first = cfg.models[by_model_.at(m).front()];
      if (first.routing != config::routing_mode::prefix) continue;
      key_bytes_[model] = first.prefix_bytes;
      break;
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
    surface_set all = 0;
    for (auto idx : deps) all = static_cast<surface_set>(all | deployments_[idx].serves);
    out += "; surfaces " + names_of(all) + "; tries ";
    const auto& chain = chain_of(model);
    for (std::size_t i = 0; i < chain.size(); ++i) {
      if (i > 0) out += " -> ";
      out += chain[i];
    }
    out += "\n";
  }
  return out;
}

bool router::serves(const std::string& model, surface s) const {
  auto it = by_model_.find(model);
  if (it == by_model_.end()) return false;
  return std::any_of(it->second.begin(), it->second.end(),
                     [&](std::size_t idx) { return tether::serves(deployments_[idx].serves, s); });
}

std::optional<token_overweight> router::too_heavy(const std::string& model, surface where,
                                                  std::uint64_t prompt_tokens,
                                                  std::optional<std::uint64_t> max_output) const {
  if (!any_token_cap_) return std::nullopt;  // the common case: no lookup on the request path
  auto it = by_model_.find(model);
  if (it == by_model_.end()) return std::nullopt;
  std::optional<token_overweight> closest;
  for (auto idx : it->second) {
    const auto& d = deployments_[idx];
    if (!tether::serves(d.serves, where)) continue;
    const auto weight = token_weight(prompt_tokens, max_output, d.default_max_tokens);
    if (d.token_cap == 0 || weight <= d.token_cap) return std::nullopt;
    if (!closest || d.token_cap > closest->cap) closest = token_overweight{weight, d.token_cap};
  }
  return closest;
}

std::uint32_t router::default_max_tokens(const std::string& model, surface where) const {
  if (auto it = by_model_.find(model); it != by_model_.end()) {
    for (auto idx : it->second) {
      if (tether::serves(deployments_[idx].serves, where))
        return deployments_[idx].default_max_tokens;
    }
  }
  return deployment{}.default_max_tokens;
}

std::optional<std::size_t> router::deployment_on(const std::string& model, surface where,
                                                 std::size_t upstream) const {
  auto it = by_model_.find(model);
  if (it == by_model_.end()) return std::nullopt;
  for (auto idx : it->second) {
    const auto& d = deployments_[idx];
    if (d.upstream == upstream && tether::serves(d.serves, where)) return idx;
  }
  return std::nullopt;
}

bool router::any_in_service(const std::string& model, surface where, const upstream_health& health,
                            std::chrono::steady_clock::time_point now) const {
  auto it = by_model_.find(model);
  if (it == by_model_.end()) return false;
  return std::any_of(it->second.begin(), it->second.end(), [&](std::size_t idx) {
    return tether::serves(deployments_[idx].serves, where) &&
           health.available(deployments_[idx].upstream, now);
  });
}

route_choice router::choose(const std::string& model, surface where,
                            std::span<const std::size_t> tried, const upstream_health& health,
                            std::chrono::steady_clock::time_point now, std::uint64_t random,
                            std::span<const std::size_t> excluded,
                            std::optional<std::uint64_t> affinity) const {
  auto it = by_model_.find(model);
  if (it == by_model_.end() || it->second.empty()) return {};
  boost::container::small_vector<std::size_t, 8> candidates;
  for (auto idx : it->second) {
    if (tether::serves(deployments_[idx].serves, where) &&
        std::find(excluded.begin(), excluded.end(), idx) == excluded.end())
      candidates.push_back(idx);
  }
  if (candidates.empty()) return {};
  auto untried = [&](std::size_t idx) {
    return std::find(tried.begin(), tried.end(), idx) == tried.end();
  };
  boost::container::small_vector<std::size_t, 8> pool;
  for (auto idx : candidates) {
    if (untried(idx) && health.available(deployments_[idx].upstream, now)) pool.push_back(idx);
  }
  // Every healthy one tried already: a retry may go back to one of them.
  if (pool.empty()) {
    for (auto idx : candidates) {
      if (health.available(deployments_[idx].upstream, now)) pool.push_back(idx);
    }
  }
  // No request fails only because the gateway took its upstreams out: with none in service, the
  // attempts spread over them all by the usual choice, so that one dead deployment cannot take
  // every try (the one back soonest could be the dead one). `available_at` says when the first
  // comes back, for the caller's choice between models.
  bool healthy = true;
  auto back_at = std::chrono::steady_clock::time_point::max();
  if (pool.empty()) {
    healthy = false;
    for (auto idx : candidates) {
      back_at = std::min(back_at, health.available_at(deployments_[idx].upstream));
      if (untried(idx)) pool.push_back(idx);
    }
    if (pool.empty()) pool.assign(candidates.begin(), candidates.end());
  }
  route_kind counted = route_kind::none;
  if (!prefix_.empty()) {
    if (auto pr = prefix_.find(model); pr != prefix_.end()) {
      counted = route_kind::least_work;
      if (affinity && healthy && tried.empty()) {
        // The key's path over the deployments in service (an ejected one is skipped: the next
        // is the home while it is out); the first within the bound takes it.
        boost::container::small_vector<ring_candidate, 8> path;
        for (auto idx : pr->second.ring.order(*affinity)) {
          if (std::find(pool.begin(), pool.end(), idx) == pool.end()) continue;
          const auto up = deployments_[idx].upstream;
          path.push_back(
              {idx, static_cast<std::uint64_t>(std::max<std::int64_t>(health.live_work(up), 0)),
               health.weight(up)});
        }
        if (auto at = first_within_bound(path, pr->second.load_factor)) {
          route_choice out;
          out.deployment = path[*at].deployment;
          out.route = *at == 0 ? route_kind::prefix_home : route_kind::prefix_spill;
          return out;
        }
      }
    }
  }
  std::uint64_t total = 0;
  for (auto idx : pool) total += health.weight(deployments_[idx].upstream);
  auto draw = [&](std::uint32_t bits) {
    auto r = bits % total;
    for (auto idx : pool) {
      const auto w = health.weight(deployments_[idx].upstream);
      if (r < w) return idx;
      r -= w;
    }
    return pool.back();
  };
  const auto a = draw(static_cast<std::uint32_t>(random));
  const auto b = draw(static_cast<std::uint32_t>(random >> 32));
  const auto ua = deployments_[a].upstream;
  const auto ub = deployments_[b].upstream;
  // live(a) / weight(a) < live(b) / weight(b), without division; a tie keeps the first draw, so
  // that with no load at all the weights alone decide.
  const auto la = static_cast<std::uint64_t>(std::max<std::int64_t>(health.live_work(ua), 0));
  const auto lb = static_cast<std::uint64_t>(std::max<std::int64_t>(health.live_work(ub), 0));
  route_choice out;
  out.deployment = lb * health.weight(ua) < la * health.weight(ub) ? b : a;
  out.healthy = healthy;
  out.route = counted;
  if (!healthy) out.available_at = back_at;
  return out;
}

std::uint64_t route_random() {
  thread_local std::mt19937_64 gen{std::random_device{}()};
  return gen();
}

}  // namespace tether
