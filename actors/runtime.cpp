#include "actors/runtime.hpp"

#include <algorithm>

namespace tether {
namespace {

std::shared_ptr<net::upstream_transport> client_for(const config::upstream_config& u,
                                                    const net::io_group& io) {
  net::upstream_endpoint ep;
  ep.tls = u.url.tls;
  ep.host = u.url.host;
  ep.port = u.url.port;
  ep.connect_timeout = u.connect_timeout;
  ep.max_idle_connections = u.max_in_flight;
  ep.idle_timeout = u.idle_timeout;
  return std::make_shared<net::upstream_client>(io, ep);
}

std::vector<std::string> names_of(const config::gateway_config& cfg) {
  std::vector<std::string> names;
  for (const auto& u : cfg.upstreams) names.push_back(u.name);
  return names;
}

// One decode step per upstream that names an engine; `running`'s where it had one for the index.
std::vector<std::shared_ptr<decode_step>> decode_steps_for(const config::gateway_config& cfg,
                                                           const gateway_runtime* running) {
  std::vector<std::shared_ptr<decode_step>> steps;
  for (std::size_t i = 0; i < cfg.upstreams.size(); ++i) {
    if (cfg.upstreams[i].engine == config::engine_kind::openai) {
      steps.emplace_back();
    } else if (running != nullptr && i < running->decode_steps.size() && running->decode_steps[i]) {
      steps.push_back(running->decode_steps[i]);
    } else {
      steps.push_back(std::make_shared<decode_step>());
    }
  }
  return steps;
}

// Which ways of telling a call some model of `rt` uses.
void note_call_identities(gateway_runtime& rt) {
  for (const auto& m : rt.cfg.models) {
    const auto settings = rt.cfg.effective_request(m.name);
    if (settings.call_window.count() <= 0) continue;
    if (settings.call_identity == config::call_identity_mode::session) rt.calls_by_session = true;
    if (settings.call_identity == config::call_identity_mode::body) rt.calls_by_body = true;
  }
}

}  // namespace

runtime_ptr build_runtime(config::gateway_config cfg, const net::io_group& io) {
  auto rt = std::make_shared<gateway_runtime>();
  rt->cfg = std::move(cfg);
  rt->routes = std::make_unique<router>(rt->cfg);
  for (const auto& u : rt->cfg.upstreams) rt->upstreams.push_back(client_for(u, io));
  rt->decode_steps = decode_steps_for(rt->cfg, nullptr);
  rt->stats = std::make_shared<metrics>(names_of(rt->cfg));
  rt->stats->key_budgets_set(rt->cfg.keys);
  rt->retries = std::make_shared<retry_budget>(rt->cfg.upstreams.size(),
                                               rt->cfg.request.min_retry_concurrency,
                                               rt->cfg.request.retry_budget_percent);
  rt->health = std::make_shared<upstream_health>(
      [stats = rt->stats.get()](std::size_t i) { return stats->upstream_work(i); });
  rt->health->configure(rt->cfg);
  rt->stats->watch_health(rt->health);
  rt->affinity = std::make_shared<response_affinity>(rt->cfg.request.response_affinity_max);
  rt->calls = std::make_shared<call_table>(rt->cfg.request.call_table_max);
  note_call_identities(*rt);
  rt->timers = net::make_io_timer_service(io);
  if (!rt->cfg.telemetry.otlp_endpoint.empty()) {
    net::otlp_options trace_opts;
    trace_opts.endpoint = rt->cfg.telemetry.otlp_endpoint;
    trace_opts.service_name = rt->cfg.telemetry.service_name;
    rt->tracer = std::make_shared<net::otlp_exporter>(io.at(0), trace_opts);
  }
  return rt;
}

runtime_ptr next_runtime(const gateway_runtime& running, config::gateway_config next,
                         const std::vector<std::size_t>& fresh_upstreams, const net::io_group& io) {
  auto rt = std::make_shared<gateway_runtime>();
  rt->cfg = std::move(next);
  rt->routes = std::make_unique<router>(rt->cfg);
  for (std::size_t i = 0; i < rt->cfg.upstreams.size(); ++i) {
    const bool fresh =
        i >= running.upstreams.size() ||
        std::find(fresh_upstreams.begin(), fresh_upstreams.end(), i) != fresh_upstreams.end();
    rt->upstreams.push_back(fresh ? client_for(rt->cfg.upstreams[i], io) : running.upstreams[i]);
  }
  rt->decode_steps = decode_steps_for(rt->cfg, &running);
  rt->stats = running.stats;
  rt->retries = running.retries;
  rt->health = running.health;
  rt->affinity = running.affinity;
  rt->calls = running.calls;
  note_call_identities(*rt);
  rt->timers = running.timers;
  rt->tracer = running.tracer;
  rt->budget = running.budget;
  rt->budget_shards = running.budget_shards;
  rt->supervisors = running.supervisors;
  rt->drain = running.drain;
  rt->health_monitor = running.health_monitor;
  rt->engine_monitor = running.engine_monitor;
  rt->ledger = running.ledger;
  rt->ledger_tally = running.ledger_tally;
  return rt;
}

void share_limits_of(const gateway_runtime& next) {
  next.stats->name_upstreams(names_of(next.cfg));
  std::vector<bool> retired;
  for (const auto& u : next.cfg.upstreams) retired.push_back(u.retired);
  next.stats->retire_upstreams(std::move(retired));
  next.stats->key_budgets_set(next.cfg.keys);
  next.retries->reshape(next.cfg.upstreams.size(), next.cfg.request.min_retry_concurrency,
                        next.cfg.request.retry_budget_percent);
  next.health->configure(next.cfg);
  next.affinity->set_capacity(next.cfg.request.response_affinity_max);
  next.calls->set_capacity(next.cfg.request.call_table_max);
}

}  // namespace tether
