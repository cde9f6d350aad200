#include "config/reload.hpp"

#include <algorithm>
#include <set>
#include <type_traits>

#include <fmt/format.h>

#include "config/settings.hpp"

namespace tether::config {
namespace {

// Whether any setting of the section differs between two of its entries.
bool differs(section where, const void* a, const void* b) {
  for (const auto& s : settings_of(where)) {
    if (!s.ops->same(a, b)) return true;
  }
  return false;
}

// What an upstream's pool is built from (net::upstream_endpoint): a change here needs new
// connections; a change of its key or its health settings does not.
bool same_endpoint(const upstream_config& a, const upstream_config& b) {
  for (const auto& s : settings_of(section::upstreams)) {
    if (s.reload != on_reload::new_connections) continue;
    const auto same = s.ops->same_endpoint != nullptr ? s.ops->same_endpoint : s.ops->same;
    if (!same(&a, &b)) return false;
  }
  return true;
}

bool same_upstream(const upstream_config& a, const upstream_config& b) {
  return !differs(section::upstreams, &a, &b);
}

// The struct of a one-table section; the [[...]] sections have none (and no restart setting:
// tests/config/settings_test.cpp holds the table to that).
template <class G>
auto* table_of(G& cfg, section where) {
  using ptr = std::conditional_t<std::is_const_v<G>, const void*, void*>;
  switch (where) {
    case section::server:
      return static_cast<ptr>(&cfg.server);
    case section::request:
      return static_cast<ptr>(&cfg.request);
    case section::budget:
      return static_cast<ptr>(&cfg.budget);
    case section::cluster:
      return static_cast<ptr>(&cfg.cluster);
    case section::telemetry:
      return static_cast<ptr>(&cfg.telemetry);
    case section::ledger:
      return static_cast<ptr>(&cfg.ledger);
    case section::upstreams:
    case section::models:
    case section::keys:
      break;
  }
  return static_cast<ptr>(nullptr);
}

// The settings a reload leaves for a restart: named in the plan ("server.listen"; [cluster]'s as
// one, "cluster": its keys are one decision, host or member), their running values kept.
void keep_for_restart(const gateway_config& running, gateway_config& loaded,
                      std::vector<std::string>& out) {
  bool cluster_named = false;
  for (const auto& s : all_settings()) {
    if (s.reload != on_reload::restart) continue;
    const void* was = table_of(running, s.where);
    void* now = table_of(loaded, s.where);
    if (was == nullptr || s.ops->same(was, now)) continue;
    if (s.where != section::cluster) {
      out.push_back(fmt::format("{}.{}", name_of(s.where), s.key));
    } else if (!cluster_named) {
      out.emplace_back(name_of(s.where));
      cluster_named = true;
    }
    s.ops->copy(now, was);
  }
}

std::set<std::string> model_names(const gateway_config& cfg) {
  std::set<std::string> names;
  for (const auto& m : cfg.models) names.insert(m.name);
  return names;
}

std::vector<model_config> deployments_of(const gateway_config& cfg, const std::string& name) {
  std::vector<model_config> out;
  for (const auto& m : cfg.models) {
    if (m.name == name) out.push_back(m);
  }
  return out;
}

// The running upstreams at their indices (the file's entry where it still names one, else the
// running entry retired), then the file's new ones.
void arrange_upstreams(const gateway_config& running, gateway_config& loaded, reload_plan& plan) {
  std::vector<upstream_config> arranged;
  std::vector<bool> taken(loaded.upstreams.size(), false);
  for (std::size_t i = 0; i < running.upstreams.size(); ++i) {
    const auto& old = running.upstreams[i];
    auto it = std::find_if(loaded.upstreams.begin(), loaded.upstreams.end(),
                           [&](const upstream_config& u) { return u.name == old.name; });
    if (it == loaded.upstreams.end()) {
      arranged.push_back(old);
      arranged.back().retired = true;
      if (!old.retired) {
        plan.retired_upstreams.push_back(i);
        plan.changes.push_back("upstream " + old.name + " removed (its idle connections close)");
      }
      continue;
    }
    taken[static_cast<std::size_t>(it - loaded.upstreams.begin())] = true;
    if (old.retired) {
      plan.fresh_upstreams.push_back(i);
      plan.changes.push_back("upstream " + old.name + " added back");
    } else if (!same_endpoint(old, *it)) {
      plan.fresh_upstreams.push_back(i);
      plan.changes.push_back("upstream " + old.name + " changed (new connections)");
    } else if (!same_upstream(old, *it)) {
      plan.changes.push_back("upstream " + old.name + " changed");
    }
    arranged.push_back(std::move(*it));
  }
  for (std::size_t j = 0; j < loaded.upstreams.size(); ++j) {
    if (taken[j]) continue;
    plan.fresh_upstreams.push_back(arranged.size());
    plan.changes.push_back("upstream " + loaded.upstreams[j].name + " added");
    arranged.push_back(std::move(loaded.upstreams[j]));
  }
  loaded.upstreams = std::move(arranged);
}

// Keys likewise: a key keeps its index (its cap counts the slots its requests in flight hold);
// a removed one stays in its place and matches no token.
void arrange_keys(const gateway_config& running, gateway_config& loaded, reload_plan& plan) {
  std::vector<key_config> arranged;
  std::vector<bool> taken(loaded.keys.size(), false);
  for (const auto& old : running.keys) {
    auto it = std::find_if(loaded.keys.begin(), loaded.keys.end(),
                           [&](const key_config& k) { return k.name == old.name; });
    if (it == loaded.keys.end()) {
      key_config gone;
      gone.name = old.name;
      gone.retired = true;
      if (!old.retired) plan.changes.push_back("key " + old.name + " removed");
      arranged.push_back(std::move(gone));
      continue;
    }
    taken[static_cast<std::size_t>(it - loaded.keys.begin())] = true;
    if (old.retired) {
      plan.changes.push_back("key " + old.name + " added back");
    } else if (differs(section::keys, &old, &*it)) {
      plan.changes.push_back("key " + old.name + " changed");
    }
    arranged.push_back(std::move(*it));
  }
  for (std::size_t j = 0; j < loaded.keys.size(); ++j) {
    if (taken[j]) continue;
    plan.changes.push_back("key " + loaded.keys[j].name + " added");
    arranged.push_back(std::move(loaded.keys[j]));
  }
  loaded.keys = std::move(arranged);
}

// The loader refuses budgets and admin keys with [ledger] off in the file; this catches the file
// that turns the ledger on with them, which a running gateway without its ledger could not
// honour until a restart.
std::optional<std::string> ledger_off_for_keys(const gateway_config& next) {
  if (next.ledger.enabled) return std::nullopt;
  for (const auto& k : next.keys) {
    for (const auto& s : settings_of(section::keys)) {
      if (!s.needs_ledger || !in_use(s, &k)) continue;
      return fmt::format(
          "{}: key \"{}\": {} needs the ledger, which is off in the running gateway until a "
          "restart (ledger.enabled); restart to apply",
          next.source_file, k.name, s.key);
    }
  }
  return std::nullopt;
}

}  // namespace

reload_plan plan_reload(const gateway_config& running, gateway_config loaded) {
  reload_plan plan;
  keep_for_restart(running, loaded, plan.needs_restart);
  if (auto refused = ledger_off_for_keys(loaded)) {
    reload_plan out;
    out.error = std::move(refused);
    return out;
  }
  // The log level applies at once.
  if (loaded.telemetry.log_level != running.telemetry.log_level)
    plan.changes.push_back("telemetry.log_level " + loaded.telemetry.log_level);

  arrange_upstreams(running, loaded, plan);
  if (loaded.upstreams.size() > max_upstreams) {
    reload_plan refused;
    refused.error = fmt::format(
        "{}: upstreams: more than {} upstreams since the gateway started (removed ones keep "
        "their place); restart to apply",
        loaded.source_file, max_upstreams);
    return refused;
  }
  arrange_keys(running, loaded, plan);

  const auto before = model_names(running);
  const auto after = model_names(loaded);
  for (const auto& m : after) {
    if (before.count(m) == 0) plan.changes.push_back("model " + m + " added");
  }
  for (const auto& m : before) {
    if (after.count(m) == 0) plan.changes.push_back("model " + m + " removed");
  }
  for (const auto& m : before) {
    if (after.count(m) == 0) continue;
    if (deployments_of(running, m) != deployments_of(loaded, m))
      plan.changes.push_back("model " + m + " changed");
  }
  if (!(running.request == loaded.request)) plan.changes.emplace_back("[request] changed");
  if (!(running.budget == loaded.budget)) plan.changes.emplace_back("[budget] changed");
  plan.next = std::move(loaded);
  return plan;
}

}  // namespace tether::config
