#include "actors/engine_metrics_actor.hpp"

#include <map>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "actors/access_log.hpp"
#include "actors/actor_timers.hpp"
#include "actors/messages.hpp"
#include "actors/policy/engine/engine_metrics.hpp"
#include "actors/policy/engine/engine_release.hpp"
#include "actors/policy/engine/orphan_watch.hpp"
#include "actors/upstream_auth.hpp"

namespace tether {
namespace {

// A poll's answer, gathered on the io thread and reported once the exchange has closed, so that
// no poll outlives its report. A body past max_engine_metrics_bytes is not kept: the exchange is
// cancelled at once, as a response over max_response_bytes is (actors/relay_events.cpp).
class poll_events final : public net::upstream_events {
 public:
  poll_events(caf::actor_addr owner, std::size_t upstream, std::uint64_t generation)
      : owner_(std::move(owner)), upstream_(upstream), generation_(generation) {}

  void attach(const std::shared_ptr<net::upstream_exchange>& exchange) {
    bool cancel_now = false;
    {
      std::lock_guard lock{mutex_};
      exchange_ = exchange;
      cancel_now = too_large_;
    }
    if (cancel_now) exchange->cancel();
  }

  void on_connected(bool) override {}
  void on_head(int status, net::header_list) override { status_ = status; }
  void on_body(std::string bytes) override {
    if (too_large_) return;
    if (body_.size() + bytes.size() <= max_engine_metrics_bytes) {
      body_ += bytes;
      return;
    }
    body_.clear();
    body_.shrink_to_fit();
    std::shared_ptr<net::upstream_exchange> exchange;
    {
      std::lock_guard lock{mutex_};
      too_large_ = true;
      exchange = exchange_.lock();
    }
    if (exchange) exchange->cancel();
  }
  void on_end() override { whole_ = true; }
  void on_failure(net::upstream_failure, std::string message) override {
    failure_ = std::move(message);
  }
  void on_closed() override {
    std::string why = too_large_ ? fmt::format("a body over {} bytes", max_engine_metrics_bytes)
                      : !failure_.empty() ? failure_
                      : status_ == 0      ? std::string{"no answer within the connect timeout"}
                      : !whole_           ? std::string{"no whole body within the connect timeout"}
                                          : "status " + std::to_string(status_);
    if (auto a = caf::actor_cast<caf::actor>(owner_)) {
      caf::anon_send(a, engine_read_atom::value, static_cast<std::uint64_t>(upstream_), generation_,
                     static_cast<std::int32_t>(status_), whole_ && !too_large_, std::move(body_),
                     std::move(why));
    }
  }

 private:
  caf::actor_addr owner_;
  std::size_t upstream_;
  std::uint64_t generation_;
  int status_ = 0;
  bool whole_ = false;
  std::string body_;
  std::string failure_;
  std::mutex mutex_;  // exchange_ and too_large_, between attach and the io thread
  std::weak_ptr<net::upstream_exchange> exchange_;
  bool too_large_ = false;
};

struct poll_state {
  std::uint64_t generation = 0;  // a tick or an answer of an older generation is stale
  std::string settings;          // what the poll follows; "" = not polled
  engine_series series;
  std::shared_ptr<net::upstream_exchange> exchange;  // the poll out, if any
  std::int64_t live_at_send = 0;
  orphan_watch watch;
  bool reading = true;  // the last poll read the engine's counts (or none failed yet)
  // The cut attempts holding their slots until the engine's count lets them go, and what the
  // poll out knew when it was sent.
  engine_release_book<caf::actor_addr> held;
  std::int64_t sent_ns = 0;
  std::int64_t unheld_at_send = 0;  // tether's live work without the held attempts
  std::int64_t soon_ns = 0;         // an extra poll is due then for the held attempts; 0: none
};

// An extra poll for held attempts comes no sooner than this after the last: the smallest
// metrics_interval_ms allowed.
constexpr std::chrono::milliseconds min_poll_gap{100};

struct engine_state {
  caf::event_based_actor* self = nullptr;
  runtime_ptr rt;
  std::optional<actor_timers> timers;
  std::map<std::size_t, poll_state> polls;

  const std::string& name(std::size_t upstream) const { return rt->cfg.upstreams[upstream].name; }

  // tether's live work on the upstream: the slots its budget granted, until each connection's
  // end. A budget host counts the whole cluster's, which its engines serve.
  std::int64_t live(std::size_t upstream) const {
    return rt->cfg.cluster.budget_listen.empty() ? rt->stats->upstream_work(upstream)
                                                 : rt->stats->cluster_slots(upstream);
  }

  // tether's live work on the upstream without the cut attempts held for the engine.
  std::int64_t unheld(std::size_t upstream) const {
    return rt->stats->upstream_work(upstream) - rt->stats->upstream_lingering(upstream);
  }

  void release(const std::vector<caf::actor_addr>& attempts) {
    for (const auto& a : attempts) {
      if (auto actor = caf::actor_cast<caf::actor>(a)) self->send(actor, grace_over_atom::value);
    }
  }

  // A cut attempt to hold until the engine's count lets it go. An engine no longer followed (a
  // reload took its metrics_path) lets it go at once, as without one.
  void hold(std::size_t upstream, std::int64_t closed_ns, std::int64_t due_ns,
            std::int64_t bound_ns, const caf::actor_addr& attempt) {
    auto it = polls.find(upstream);
    if (it == polls.end() || it->second.settings.empty()) return release({attempt});
    it->second.held.lingering(attempt, closed_ns, due_ns, bound_ns);
    poll_soon(upstream);
  }

  // The held attempts are expected let go at their decode steps: a poll then tells, without
  // waiting for the interval's next one.
  void poll_soon(std::size_t upstream) {
    auto& p = polls[upstream];
    const auto due = p.held.next_due();
    if (!due || p.exchange || p.settings.empty()) return;  // a poll out reads for them
    const auto at = std::max(*due, p.sent_ns + std::chrono::nanoseconds{min_poll_gap}.count());
    if (p.soon_ns != 0 && p.soon_ns <= at) return;
    p.soon_ns = at;
    timers->after(std::chrono::nanoseconds{std::max<std::int64_t>(0, at - now_ns())},
                  engine_soon_atom::value, static_cast<std::uint64_t>(upstream), p.generation);
  }

  void soon(std::size_t upstream, std::uint64_t generation) {
    auto it = polls.find(upstream);
    if (it == polls.end() || it->second.generation != generation) return;
    auto& p = it->second;
    p.soon_ns = 0;
    if (p.held.size() == 0 || p.settings.empty() || p.exchange) return;
    if (now_ns() < p.sent_ns + std::chrono::nanoseconds{min_poll_gap}.count()) {
      return poll_soon(upstream);
    }
    send_poll(upstream, generation);
  }

  // Every upstream with a metrics_path is polled from now with its settings; one whose settings
  // changed starts afresh (its engine may be another), one removed or without a path no longer.
  void follow(const runtime_ptr& next) {
    rt = next;
    for (std::size_t i = 0; i < rt->cfg.upstreams.size(); ++i) {
      const auto& u = rt->cfg.upstreams[i];
      const auto series = series_of(u);
      const std::string settings =
          u.retired || u.metrics_path.empty()
              ? std::string{}
              : fmt::format("{} {} {} {} {} {}", u.base_url, u.metrics_path,
                            u.metrics_interval.count(), u.connect_timeout.count(), series.running,
                            series.queued);
      auto& p = polls[i];
      if (p.settings == settings) continue;
      if (p.exchange) p.exchange->cancel();
      release(p.held.take_all());  // another engine's count could not tell of them
      poll_state fresh;
      fresh.generation = p.generation + 1;
      fresh.settings = settings;
      fresh.series = series;
      p = std::move(fresh);
      rt->stats->engine_polled(i, !settings.empty());
      if (settings.empty()) continue;
      // llama.cpp notices a non-streaming caller's disconnect only after a second with no result
      // for any task, and each poll is a task: measured, such a request then runs to max_tokens.
      if (u.engine == config::engine_kind::llamacpp &&
          u.upstream_stream == config::upstream_stream_mode::as_requested) {
        log_warn(fmt::format(
            "upstream {}: its metrics poll is traffic to llama.cpp, so a non-streaming request "
            "whose caller left runs on to its max_tokens; upstream_stream = \"always\" stops it",
            u.name));
      }
      tick(i, p.generation);
    }
  }

  void tick(std::size_t upstream, std::uint64_t generation) {
    auto it = polls.find(upstream);
    if (it == polls.end() || it->second.generation != generation || it->second.settings.empty())
      return;
    auto& p = it->second;
    const auto& u = rt->cfg.upstreams[upstream];
    // A poll still out when the next is due (an engine slower than the interval) is left to
    // finish: no two polls of one engine at once.
    if (!p.exchange) send_poll(upstream, generation);
    timers->after(u.metrics_interval, engine_poll_atom::value, static_cast<std::uint64_t>(upstream),
                  generation);
  }

  void send_poll(std::size_t upstream, std::uint64_t generation) {
    auto& p = polls[upstream];
    const auto& u = rt->cfg.upstreams[upstream];
    net::upstream_request req;
    req.method = "GET";
    req.target = u.metrics_path;
    add_upstream_auth(req.headers, u);
    req.close_at = std::chrono::steady_clock::now() + u.connect_timeout;
    p.live_at_send = live(upstream);
    p.unheld_at_send = unheld(upstream);
    p.sent_ns = now_ns();
    auto events = std::make_shared<poll_events>(self->address(), upstream, generation);
    p.exchange = rt->upstreams[upstream]->start(std::move(req), events, nullptr);
    events->attach(p.exchange);
  }

  void read(std::size_t upstream, std::uint64_t generation, int status, bool whole,
            const std::string& body, const std::string& why) {
    auto it = polls.find(upstream);
    if (it == polls.end() || it->second.generation != generation) return;  // an older poll's
    auto& p = it->second;
    p.exchange.reset();
    using result = metrics::engine_poll_result;
    std::optional<engine_counts> counts;
    auto outcome = result::failed;
    if (whole && status >= 200 && status < 300) {
      counts = read_engine_counts(body, p.series);
      outcome = counts ? result::ok : result::unreadable;
    }
    rt->stats->engine_poll_done(upstream, outcome);
    if (!counts) {
      const auto& path = rt->cfg.upstreams[upstream].metrics_path;
      if (p.reading) {
        log_warn(outcome == result::unreadable
                     ? fmt::format("upstream {} engine metrics: no sample of {} in {}",
                                   name(upstream), p.series.running, path)
                     : fmt::format("upstream {} engine metrics: the poll of {} failed: {}",
                                   name(upstream), path, why));
      }
      p.reading = false;
      p.watch.forget();
      rt->stats->engine_counts_unknown(upstream);
      release(p.held.take_due(now_ns()));
      poll_soon(upstream);
      return;
    }
    if (!p.reading) log_info(fmt::format("upstream {} engine metrics read again", name(upstream)));
    p.reading = true;
    // A request of tether's that started or ended during the round trip may or may not be in
    // the engine's count: the larger of tether's two counts leaves it out of the excess.
    p.watch.observe(counts->running + counts->queued, std::max(p.live_at_send, live(upstream)));
    rt->stats->engine_counts_set(upstream, counts->running, counts->queued, p.watch.orphaned());
    // The same request's doubt the other way: counted live only if it was live throughout.
    release(p.held.on_count(p.sent_ns, counts->running + counts->queued,
                            std::min(p.unheld_at_send, unheld(upstream)), now_ns()));
    poll_soon(upstream);
  }
};

}  // namespace

caf::behavior engine_metrics_actor(caf::event_based_actor* self, runtime_ptr rt) {
  auto st = std::make_shared<engine_state>();
  st->self = self;
  st->timers.emplace(rt->timers.get(), self->address());
  rt->stats->export_orphaned(rt->cfg.cluster.budget_host.empty());
  st->follow(rt);
  self->attach_functor([st](const caf::error&) {
    for (auto& [i, p] : st->polls) {
      if (p.exchange) p.exchange->cancel();
    }
    st->timers->cancel_all();
  });
  return {
      [st](engine_poll_atom, std::uint64_t upstream, std::uint64_t generation) {
        st->tick(upstream, generation);
      },
      [st](engine_read_atom, std::uint64_t upstream, std::uint64_t generation, std::int32_t status,
           bool whole, const std::string& body,
           const std::string& why) { st->read(upstream, generation, status, whole, body, why); },
      [st](adopt_runtime_atom, const runtime_ptr& next) { st->follow(next); },
      [st](linger_atom, std::uint64_t upstream, std::int64_t closed_ns, std::int64_t due_ns,
           std::int64_t bound_ns, const caf::actor_addr& attempt) {
        st->hold(upstream, closed_ns, due_ns, bound_ns, attempt);
      },
      [st](engine_soon_atom, std::uint64_t upstream, std::uint64_t generation) {
        st->soon(upstream, generation);
      },
  };
}

}  // namespace tether
