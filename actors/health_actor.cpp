#include "actors/health_actor.hpp"

#include <map>
#include <optional>

#include <fmt/format.h>

#include "actors/access_log.hpp"
#include "actors/actor_timers.hpp"
#include "actors/budget_actor.hpp"
#include "actors/messages.hpp"
#include "actors/policy/routing/upstream_health.hpp"
#include "actors/upstream_auth.hpp"

namespace tether {
namespace {

// A probe's answer, from the io thread: passed when the head is a 2xx; reported once the
// exchange has closed, so that no probe outlives its report.
class probe_events final : public net::upstream_events {
 public:
  probe_events(caf::actor_addr owner, std::size_t upstream)
      : owner_(std::move(owner)), upstream_(upstream) {}
  void on_connected(bool) override {}
  void on_head(int status, net::header_list) override { status_ = status; }
  void on_body(std::string) override {}
  void on_end() override {}
  void on_failure(net::upstream_failure, std::string message) override {
    failure_ = std::move(message);
  }
  void on_closed() override {
    const bool passed = status_ >= 200 && status_ < 300;
    std::string why = status_ > 0        ? "status " + std::to_string(status_)
                      : failure_.empty() ? std::string{"no answer within the connect timeout"}
                                         : failure_;
    if (auto a = caf::actor_cast<caf::actor>(owner_)) {
      caf::anon_send(a, health_result_atom::value, static_cast<std::uint64_t>(upstream_), passed,
                     std::move(why));
    }
  }

 private:
  caf::actor_addr owner_;
  std::size_t upstream_;
  int status_ = 0;
  std::string failure_;
};

struct check_state {
  std::uint64_t generation = 0;                   // a tick of an older generation is stale
  std::string path;                               // "" = not checked
  std::shared_ptr<net::upstream_exchange> probe;  // the one running, if any
  bool passing = true;
};

struct health_state {
  caf::event_based_actor* self = nullptr;
  runtime_ptr rt;
  std::optional<actor_timers> timers;
  std::map<std::size_t, check_state> checks;

  const std::string& name(std::size_t upstream) const {
    static const std::string unknown = "?";
    return upstream < rt->cfg.upstreams.size() ? rt->cfg.upstreams[upstream].name : unknown;
  }

  void announce(std::size_t upstream, bool ejected, ejection_reason reason,
                std::int64_t duration_ms, bool remote) {
    const auto why = to_string(reason);
    if (!ejected) {
      log_info(
          fmt::format("upstream {} returned to service (it was out for {})", name(upstream), why));
      return;
    }
    rt->stats->upstream_ejected(upstream, reason);
    if (!remote) tell_the_cluster(upstream, reason, duration_ms);
    const auto from = remote ? " (reported by the cluster)" : "";
    if (reason == ejection_reason::health_check) {
      log_warn(
          fmt::format("upstream {} ejected: its health check failed{}; out until a check "
                      "passes",
                      name(upstream), from));
    } else {
      log_warn(fmt::format("upstream {} ejected for {} ms: {}{}", name(upstream), duration_ms,
                           reason == ejection_reason::failures ? "consecutive failed attempts"
                                                               : "it answered 429 with Retry-After",
                           from));
    }
    if (duration_ms > 0)
      timers->after(std::chrono::milliseconds{duration_ms}, health_sweep_atom::value);
  }

  // This node's own ejections go to its budget, which in a cluster passes them through the budget
  // host to every other node (an ejection learnt from there is not passed on again). A failing
  // check ejects there for one check interval: their own checks of the same path take it on.
  void tell_the_cluster(std::size_t upstream, ejection_reason reason, std::int64_t duration_ms) {
    if (!rt->budget || upstream >= rt->cfg.upstreams.size()) return;
    const auto& u = rt->cfg.upstreams[upstream];
    const auto ms =
        reason == ejection_reason::health_check
            ? std::chrono::duration_cast<std::chrono::milliseconds>(u.health_interval).count()
            : duration_ms;
    self->send(rt->budget, health_report_atom::value, u.name, static_cast<std::int32_t>(reason),
               static_cast<std::int64_t>(ms));
  }

  // Another node's ejection, by upstream name (nodes may list their upstreams in another order).
  void news(const std::string& name, std::int32_t reason, std::int64_t remaining_ms) {
    if (reason < 0 || reason > static_cast<std::int32_t>(ejection_reason::rate_limited)) return;
    for (std::size_t i = 0; i < rt->cfg.upstreams.size(); ++i) {
      const auto& u = rt->cfg.upstreams[i];
      if (u.retired || u.name != name) continue;
      const auto now = std::chrono::steady_clock::now();
      rt->health->eject_remotely(i, static_cast<ejection_reason>(reason),
                                 now + std::chrono::milliseconds{remaining_ms}, now);
      return;
    }
  }

  void sweep() {
    if (auto next = rt->health->sweep(std::chrono::steady_clock::now())) {
      timers->after(*next - std::chrono::steady_clock::now(), health_sweep_atom::value);
    }
  }

  // Every upstream with a health_path is checked from now; one whose path went is no longer.
  void follow(const runtime_ptr& next) {
    rt = next;
    for (std::size_t i = 0; i < rt->cfg.upstreams.size(); ++i) {
      const auto& u = rt->cfg.upstreams[i];
      const std::string path = u.retired ? std::string{} : u.health_path;
      auto& c = checks[i];
      if (c.path == path) continue;
      c.path = path;
      ++c.generation;
      if (!path.empty()) tick(i, c.generation);
    }
  }

  void tick(std::size_t upstream, std::uint64_t generation) {
    auto it = checks.find(upstream);
    if (it == checks.end() || it->second.generation != generation || it->second.path.empty())
      return;
    auto& c = it->second;
    const auto& u = rt->cfg.upstreams[upstream];
    // A probe still out when the next is due (a check slower than its interval) is left to
    // finish: its close reports it.
    if (!c.probe) {
      net::upstream_request req;
      req.method = "GET";
      req.target = c.path;
      add_upstream_auth(req.headers, u);
      req.close_at = std::chrono::steady_clock::now() + u.connect_timeout;
      auto events = std::make_shared<probe_events>(self->address(), upstream);
      c.probe = rt->upstreams[upstream]->start(std::move(req), events, nullptr);
    }
    timers->after(u.health_interval, health_check_atom::value, static_cast<std::uint64_t>(upstream),
                  generation);
  }

  void result(std::size_t upstream, bool passed, const std::string& why) {
    auto it = checks.find(upstream);
    if (it == checks.end()) return;
    auto& c = it->second;
    c.probe.reset();
    if (c.path.empty()) return;  // no longer checked: a late answer decides nothing
    const auto now = std::chrono::steady_clock::now();
    if (passed) {
      rt->health->check_passed(upstream, now);
    } else {
      if (c.passing)
        log_warn(fmt::format("upstream {} health check failed: {}", name(upstream), why));
      rt->health->check_failed(upstream, now);
    }
    c.passing = passed;
  }
};

}  // namespace

caf::behavior health_actor(caf::event_based_actor* self, runtime_ptr rt) {
  auto st = std::make_shared<health_state>();
  st->self = self;
  st->timers.emplace(rt->timers.get(), self->address());
  rt->health->set_listener([addr = self->address()](const health_change& c) {
    if (auto a = caf::actor_cast<caf::actor>(addr)) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(c.duration).count();
      caf::anon_send(a, health_atom::value, static_cast<std::uint64_t>(c.upstream), c.ejected,
                     static_cast<std::int32_t>(c.reason), static_cast<std::int64_t>(ms), c.remote);
    }
  });
  st->follow(rt);
  // Read once: a start that fails clears the runtime's handles from the main thread (main.cpp's
  // stop) while this first run may be under way.
  if (auto budget = rt->budget) self->send(budget, health_subscribe_atom::value);
  self->attach_functor([st](const caf::error&) {
    st->rt->health->set_listener({});
    for (auto& [i, c] : st->checks) {
      if (c.probe) c.probe->cancel();
    }
    st->timers->cancel_all();
  });
  return {
      [st](health_atom, std::uint64_t upstream, bool ejected, std::int32_t reason,
           std::int64_t duration_ms, bool remote) {
        st->announce(upstream, ejected, static_cast<ejection_reason>(reason), duration_ms, remote);
      },
      [st](health_sweep_atom) { st->sweep(); },
      [st](health_check_atom, std::uint64_t upstream, std::uint64_t generation) {
        st->tick(upstream, generation);
      },
      [st](health_result_atom, std::uint64_t upstream, bool passed, const std::string& why) {
        st->result(upstream, passed, why);
      },
      [st](adopt_runtime_atom, const runtime_ptr& next) { st->follow(next); },
      [st](health_news_atom, const std::string& upstream, std::int32_t reason,
           std::int64_t remaining_ms) { st->news(upstream, reason, remaining_ms); },
  };
}

}  // namespace tether
