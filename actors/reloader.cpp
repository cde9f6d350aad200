#include "actors/reloader.hpp"

#include <chrono>

#include "actors/access_log.hpp"
#include "actors/budget_actor.hpp"
#include "actors/engine_metrics_actor.hpp"
#include "actors/health_actor.hpp"
#include "actors/messages.hpp"
#include "config/loader.hpp"
#include "config/reload.hpp"
#include "net/io_group.hpp"
#include "net/io_runtime.hpp"

namespace tether {
namespace {

std::string joined(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

}  // namespace

reloader::reloader(caf::actor_system& system, const net::io_group& io, gateway& gw,
                   runtime_ptr first, caf::actor local_budget)
    : system_(system),
      io_(io),
      gw_(gw),
      current_(std::move(first)),
      local_budget_(std::move(local_budget)) {}

bool reloader::refuse(const std::vector<std::string>& errors) {
  for (const auto& e : errors) log_error("config reload refused: " + e);
  log_error("config reload refused: the running config stays (" + std::to_string(errors.size()) +
            " error(s))");
  current_->stats->config_reloaded(false);
  return false;
}

bool reloader::reload() {
  const std::string file = current_->cfg.source_file;  // a copy: current_ is replaced below
  auto loaded = config::load_file(file);
  if (!loaded.errors.empty()) return refuse(loaded.errors);
  auto plan = config::plan_reload(current_->cfg, std::move(*loaded.config));
  if (plan.error) return refuse({*plan.error});
  for (const auto& key : plan.needs_restart) {
    log_warn("config reload: " + key + " changed in " + file +
             "; it applies when tether is restarted");
  }

  auto next = next_runtime(*current_, std::move(plan.next), plan.fresh_upstreams, io_);
  // The caps first, and waited for: the budget must know a new upstream's cap before the first
  // request routed to it asks for a slot.
  const auto limits = budget_limits_from(next->cfg);
  bool capped = false;
  {
    caf::scoped_actor self{system_};
    self->request(local_budget_, std::chrono::seconds(5), limits_atom::value, limits.global,
                  limits.per_upstream, limits.per_key, limits.queue_max,
                  static_cast<std::int64_t>(limits.queue_timeout.count()),
                  limits.tokens_per_upstream, limits.rpm, limits.tpm, limits.weight)
        .receive([&](bool ok) { capped = ok; }, [&](caf::error&) {});
  }
  if (!capped) return refuse({file + ": the budget did not take the new limits"});
  share_limits_of(*next);
  if (next->cfg.telemetry.log_level != current_->cfg.telemetry.log_level)
    set_log_level(next->cfg.telemetry.log_level);

  std::vector<std::shared_ptr<net::upstream_transport>> retiring;
  for (auto i : plan.retired_upstreams) retiring.push_back(next->upstreams[i]);
  // Each io thread takes the new generation between two of its own requests; the retired
  // upstreams close their idle connections once the last thread has moved on.
  bool adopted = true;
  for (std::size_t i = 0; i < io_.size(); ++i) {
    adopted = io_.at(i).run_and_wait([this, next] { gw_.adopt(next); }, std::chrono::seconds(5)) &&
              adopted;
  }
  for (const auto& u : retiring) u->retire();
  // A busy io thread takes it later, but takes it: the reload stands either way.
  if (!adopted) log_warn("config reload: an io thread had not taken the new config after 5 s");
  caf::anon_send(next->health_monitor, adopt_runtime_atom::value, next);
  caf::anon_send(next->engine_monitor, adopt_runtime_atom::value, next);
  current_ = std::move(next);
  current_->stats->config_reloaded(true);
  log_info("config reloaded from " + file + ": " +
           (plan.changes.empty() ? std::string{"no change"} : joined(plan.changes)));
  return true;
}

}  // namespace tether
