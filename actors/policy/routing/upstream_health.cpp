#include "actors/policy/routing/upstream_health.hpp"

#include <algorithm>
#include <limits>

namespace tether {

std::string_view to_string(ejection_reason r) {
  switch (r) {
    case ejection_reason::failures:
      return "failures";
    case ejection_reason::health_check:
      return "health_check";
    case ejection_reason::rate_limited:
      return "rate_limited";
  }
  return "unknown";
}

namespace {
std::int64_t ns_of(steady_time t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
constexpr std::uint32_t max_doublings = 30;
}  // namespace

upstream_health::upstream_health(load_source load, std::size_t capacity)
    : load_(std::move(load)),
      capacity_(capacity),
      slots_(std::make_unique<slot[]>(capacity)),
      states_(capacity) {}

void upstream_health::configure(const config::gateway_config& cfg) {
  std::vector<health_change> out;
  {
    std::lock_guard lock{mu_};
    const auto now = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < cfg.upstreams.size() && i < capacity_; ++i) {
      const auto& u = cfg.upstreams[i];
      auto& s = states_[i];
      s.conf = settings{std::max<std::uint32_t>(u.weight, 1), u.eject_after_failures, u.eject_base,
                        std::max(u.eject_max, u.eject_base)};
      // Evidence that nothing will clear any more is dropped: no threshold, no check.
      if (s.conf.eject_after == 0 && s.reason == ejection_reason::failures) {
        s.ejected_until = {};
        s.streak = 0;
      }
      if (u.health_path.empty()) s.check_failing = false;
      slots_[i].weight.store(s.conf.weight, std::memory_order_relaxed);
      publish(i, s);
      return_if_back(i, s, now, out);
    }
  }
  tell(out);
}

void upstream_health::set_listener(listener l) {
  std::lock_guard lock{mu_};
  listener_ = std::move(l);
}

bool upstream_health::blocked(const state& s, steady_time now) {
  return s.check_failing || now < s.ejected_until || now < s.cooldown_until;
}

void upstream_health::publish(std::size_t upstream, const state& s) {
  const auto until = s.check_failing ? std::numeric_limits<std::int64_t>::max()
                                     : ns_of(std::max(s.ejected_until, s.cooldown_until));
  slots_[upstream].blocked_until_ns.store(until, std::memory_order_relaxed);
}

template <class F>
void upstream_health::change(std::size_t upstream, F&& f) {
  if (!valid(upstream)) return;
  std::vector<health_change> out;
  {
    std::lock_guard lock{mu_};
    f(states_[upstream], out);
  }
  tell(out);
}

// An upstream going out of service is announced once; a later reason while it is out only
// lengthens its time out.
void upstream_health::eject(std::size_t upstream, state& s, ejection_reason reason, steady_time now,
                            steady_time until, config::millis duration,
                            std::vector<health_change>& out) {
  const bool was_out = blocked(s, now);
  if (reason == ejection_reason::rate_limited) {
    s.cooldown_until = std::max(s.cooldown_until, until);
  } else if (reason == ejection_reason::health_check) {
    s.check_failing = true;
  } else {
    s.ejected_until = std::max(s.ejected_until, until);
  }
  publish(upstream, s);
  if (was_out) return;
  s.reason = reason;
  s.announced_out = true;
  out.push_back(health_change{upstream, true, reason, duration, false});
}

void upstream_health::return_if_back(std::size_t upstream, state& s, steady_time now,
                                     std::vector<health_change>& out) {
  if (!s.announced_out || blocked(s, now)) return;
  s.announced_out = false;
  out.push_back(health_change{upstream, false, s.reason, {}, false});
}

void upstream_health::attempt_succeeded(std::size_t upstream) {
  if (!valid(upstream)) return;
  std::lock_guard lock{mu_};
  states_[upstream].streak = 0;
}

void upstream_health::attempt_failed(std::size_t upstream, steady_time now) {
  change(upstream, [&](state& s, std::vector<health_change>& out) {
    // Attempts that were on their way when it went out, or sent because every deployment was
    // out, add nothing: the ejection already runs.
    if (s.conf.eject_after == 0 || blocked(s, now)) return;
    if (++s.streak < s.conf.eject_after) return;
    s.streak = 0;
    // In service for eject_max since the last ejection ended: the repeats are forgotten.
    if (s.ejections > 0 && now >= s.ejected_until + s.conf.max) s.ejections = 0;
    const auto doubled = s.conf.base * (std::int64_t{1} << std::min(s.ejections, max_doublings));
    const auto duration = std::min(doubled, s.conf.max);
    s.ejections = std::min(s.ejections + 1, max_doublings);
    eject(upstream, s, ejection_reason::failures, now, now + duration, duration, out);
  });
}

void upstream_health::rate_limited(std::size_t upstream, config::millis retry_after,
                                   steady_time now) {
  if (retry_after.count() <= 0) return;
  change(upstream, [&](state& s, std::vector<health_change>& out) {
    // A Retry-After is the upstream's own word, but not beyond what the operator allows.
    const auto duration = std::min(retry_after, s.conf.max);
    eject(upstream, s, ejection_reason::rate_limited, now, now + duration, duration, out);
  });
}

void upstream_health::check_failed(std::size_t upstream, steady_time now) {
  change(upstream, [&](state& s, std::vector<health_change>& out) {
    if (s.check_failing) return;
    eject(upstream, s, ejection_reason::health_check, now, steady_time::max(), {}, out);
  });
}

// A passing check ends an ejection of any cause but a cooldown: a 429's Retry-After is the
// upstream asking for time, which a health endpoint does not take back.
void upstream_health::check_passed(std::size_t upstream, steady_time now) {
  change(upstream, [&](state& s, std::vector<health_change>& out) {
    if (!s.check_failing && now >= s.ejected_until) return;
    s.check_failing = false;
    s.ejected_until = {};
    s.streak = 0;
    publish(upstream, s);
    return_if_back(upstream, s, now, out);
  });
}

void upstream_health::eject_remotely(std::size_t upstream, ejection_reason reason,
                                     steady_time until, steady_time now) {
  if (until <= now) return;
  change(upstream, [&](state& s, std::vector<health_change>& out) {
    const auto duration = std::chrono::duration_cast<config::millis>(until - now);
    // A peer's failing check is its own view of reachability: here it counts as an ejection
    // for the time the peer's check interval could take to change its mind.
    const auto kind = reason == ejection_reason::rate_limited ? reason : ejection_reason::failures;
    eject(upstream, s, kind, now, until, duration, out);
    if (!out.empty()) {
      out.back().reason = reason;
      out.back().remote = true;
      s.reason = reason;
    }
  });
}

std::optional<steady_time> upstream_health::sweep(steady_time now) {
  std::vector<health_change> out;
  std::optional<steady_time> next;
  {
    std::lock_guard lock{mu_};
    for (std::size_t i = 0; i < capacity_; ++i) {
      auto& s = states_[i];
      if (!s.announced_out) continue;
      return_if_back(i, s, now, out);
      if (s.announced_out && !s.check_failing) {
        const auto end = std::max(s.ejected_until, s.cooldown_until);
        if (!next || end < *next) next = end;
      }
    }
  }
  tell(out);
  return next;
}

bool upstream_health::available(std::size_t upstream, steady_time now) const {
  if (!valid(upstream)) return true;
  return ns_of(now) >= slots_[upstream].blocked_until_ns.load(std::memory_order_relaxed);
}

steady_time upstream_health::available_at(std::size_t upstream) const {
  if (!valid(upstream)) return {};
  const auto ns = slots_[upstream].blocked_until_ns.load(std::memory_order_relaxed);
  if (ns == std::numeric_limits<std::int64_t>::max()) return steady_time::max();
  return steady_time{
      std::chrono::duration_cast<steady_time::duration>(std::chrono::nanoseconds{ns})};
}

std::uint32_t upstream_health::weight(std::size_t upstream) const {
  if (!valid(upstream)) return 1;
  return slots_[upstream].weight.load(std::memory_order_relaxed);
}

std::int64_t upstream_health::live_work(std::size_t upstream) const {
  return load_ ? load_(upstream) : 0;
}

void upstream_health::tell(const std::vector<health_change>& changes) {
  if (changes.empty()) return;
  listener l;
  {
    std::lock_guard lock{mu_};
    l = listener_;
  }
  if (!l) return;
  for (const auto& c : changes) l(c);
}

}  // namespace tether
