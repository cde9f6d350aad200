#include "config/reload.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>

namespace tether::config {
namespace {

// What an upstream's pool is built from (net::upstream_endpoint): a change here needs new
// connections; a change of its key or its health settings does not.
bool same_endpoint(const upstream_config& a, const upstream_config& b) {
  return a.url.tls == b.url.tls && a.url.host == b.url.host && a.url.port == b.url.port &&
         a.connect_timeout == b.connect_timeout && a.idle_timeout == b.idle_timeout &&
         a.max_in_flight == b.max_in_flight;
}

// Its share of traffic, its token cap and when it is ejected or checked: not part of the pool,
// so a change needs no new connections (it is reported as "upstream X changed").
bool same_health(const upstream_config& a, const upstream_config& b) {
  return a.weight == b.weight && a.eject_after_failures == b.eject_after_failures &&
         a.eject_base == b.eject_base && a.eject_max == b.eject_max &&
         a.health_path == b.health_path && a.health_interval == b.health_interval &&
         a.max_tokens_in_flight == b.max_tokens_in_flight;
}

// What tether knows of the engine behind it: read by each new attempt and by the metrics poll.
bool same_engine(const upstream_config& a, const upstream_config& b) {
  return a.engine == b.engine && a.upstream_stream == b.upstream_stream &&
         a.metrics_path == b.metrics_path && a.metrics_interval == b.metrics_interval &&
         a.metrics_running_series == b.metrics_running_series &&
         a.metrics_queued_series == b.metrics_queued_series &&
         a.release_grace_max == b.release_grace_max;
}

bool same_upstream(const upstream_config& a, const upstream_config& b) {
  return same_endpoint(a, b) && same_health(a, b) && same_engine(a, b) &&
         a.base_url == b.base_url && a.api_key == b.api_key && a.api_key_env == b.api_key_env &&
         a.api == b.api && a.surfaces == b.surfaces;
}

void compare_server(const server_config& a, const server_config& b, std::vector<std::string>& out) {
  if (a.listen_host != b.listen_host || a.listen_port != b.listen_port)
    out.emplace_back("server.listen");
  const std::pair<bool, const char*> keys[] = {
      {a.max_request_bytes != b.max_request_bytes, "server.max_request_bytes"},
      {a.max_header_bytes != b.max_header_bytes, "server.max_header_bytes"},
      {a.max_header_fields != b.max_header_fields, "server.max_header_fields"},
      {a.max_json_depth != b.max_json_depth, "server.max_json_depth"},
      {a.max_connections != b.max_connections, "server.max_connections"},
      {a.header_timeout != b.header_timeout, "server.header_timeout_ms"},
      {a.keepalive_timeout != b.keepalive_timeout, "server.keepalive_timeout_ms"},
      {a.drain_timeout != b.drain_timeout, "server.drain_timeout_ms"},
      {a.sched_batch != b.sched_batch, "server.sched_batch"},
      {a.malloc_tcache_count != b.malloc_tcache_count, "server.malloc_tcache_count"},
      {a.threads != b.threads, "server.threads"},
  };
  for (const auto& [changed, key] : keys) {
    if (changed) out.emplace_back(key);
  }
}

void compare_telemetry(const telemetry_config& a, const telemetry_config& b,
                       std::vector<std::string>& out) {
  if (a.log_format != b.log_format) out.emplace_back("telemetry.log_format");
  if (a.otlp_endpoint != b.otlp_endpoint) out.emplace_back("telemetry.otlp_endpoint");
  if (a.service_name != b.service_name) out.emplace_back("telemetry.service_name");
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
    } else if (old.sha256_hex != it->sha256_hex || old.models != it->models ||
               old.max_in_flight != it->max_in_flight || old.rpm != it->rpm || old.tpm != it->tpm ||
               old.weight != it->weight || old.max_priority != it->max_priority) {
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

}  // namespace

reload_plan plan_reload(const gateway_config& running, gateway_config loaded) {
  reload_plan plan;
  compare_server(running.server, loaded.server, plan.needs_restart);
  if (!(running.cluster == loaded.cluster)) plan.needs_restart.emplace_back("cluster");
  compare_telemetry(running.telemetry, loaded.telemetry, plan.needs_restart);
  // Those stay as they run; the log level applies at once.
  loaded.server = running.server;
  loaded.cluster = running.cluster;
  const auto level = loaded.telemetry.log_level;
  loaded.telemetry = running.telemetry;
  if (level != running.telemetry.log_level) {
    loaded.telemetry.log_level = level;
    plan.changes.push_back("telemetry.log_level " + level);
  }

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
