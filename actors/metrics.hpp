// The gateway's Prometheus metrics (names and labels fixed by the contract). Thread-safe plain
// object shared by the actors and the HTTP side; label values come from configuration only.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "actors/policy/ledger/usage_record.hpp"
#include "actors/policy/request/outcome.hpp"
#include "actors/policy/routing/route_kind.hpp"
#include "actors/policy/routing/upstream_health.hpp"
#include "config/config.hpp"

namespace tether {

class histogram {
 public:
  // Buckets in seconds, 1 ms … 10 min: LLM latencies span both ends.
  static constexpr std::array<double, 18> bounds{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                 0.1,   0.25,   0.5,   1,    2.5,   5,
                                                 10,    30,     60,    120,  300,   600};
  void observe(double seconds);
  histogram& operator+=(const histogram& other);
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::array<std::uint64_t, bounds.size()> counts_{};
  std::uint64_t count_ = 0;
  double sum_ = 0;
};

class metrics {
 public:
  explicit metrics(std::vector<std::string> upstream_names);
  ~metrics();
  metrics(const metrics&) = delete;
  metrics& operator=(const metrics&) = delete;

  // The calling thread counts a request's own series (requests, durations, attempts, queue
  // waits, tokens, requests in flight) in a tally of its own from now on, under a lock no other
  // thread takes but a scrape, which sums the tallies. Each io thread binds itself once; an
  // unbound thread counts in the shared tally.
  void bind_this_thread();

  // The upstreams by index after a reload: the list only grows (a removed upstream keeps its
  // index and its series), up to config::max_upstreams.
  void name_upstreams(std::vector<std::string> names);
  // Which of them a reload removed (by index; one added back is not): a removed upstream takes
  // no attempts, so its tether_upstream_healthy reads 0 whatever its last health was.
  void retire_upstreams(std::vector<bool> retired);
  void config_reloaded(bool ok);
  // tether_upstream_healthy reads each upstream's state from `health` at every scrape.
  void watch_health(std::shared_ptr<const upstream_health> health);
  void upstream_ejected(std::size_t upstream, ejection_reason why);

  void request_done(const std::string& model, outcome o, double seconds);
  // An attempt's deployment chosen on a model with routing = "prefix" (route_kind.hpp).
  void route_decided(const std::string& model, route_kind kind);
  // Per key name ("" for a gateway without keys): a request refused by the key's rpm or tpm,
  // and what a request used on an upstream for a model (its tokens by kind, its spend). Labels
  // come from configuration only (key names, the models' public names), so the series stay
  // few; once a series exists, counting in it allocates nothing.
  void rate_limited(const std::string& key);
  void tokens_used(const std::string& key, std::size_t upstream, const std::string& model,
                   const ledger::usage_record& r);
  // The keys' budgets (max_tokens_per_day, …, max_spend_per_month; 0 = none), from the config
  // at start and at each reload; a retired key has none.
  void key_budgets_set(const std::vector<config::key_config>& keys);
  // What the ledger counts against a key's budgets in the current UTC day or month: its billed
  // tokens and its spend. Set by the ledger's owner; exported once set.
  void key_usage_set(const std::string& key, bool month, std::uint64_t tokens,
                     std::uint64_t spend_nanousd);
  void queue_wait(double seconds);
  // stale: its pooled connection had been closed by the upstream (outcome "stale_connection").
  void attempt_done(std::size_t upstream, outcome o, bool stale = false);
  // A retry the retry budget admitted (started) or refused (budget_exhausted).
  void retry_decided(std::size_t upstream, bool started);
  void late_work(std::size_t upstream, double seconds);
  // One call, one deadline: a client's retry of a call given what was left of its deadline
  // (served) or nothing (out_of_budget: a 504 at once); entries of the call table evicted while
  // their window was open.
  // out_of_attempts: the call's attempts were spent, answered at once with its last outcome.
  enum class call_result : std::uint8_t { served, out_of_budget, out_of_attempts };
  void call_retry(call_result r) { call_retries_[static_cast<std::size_t>(r)].fetch_add(1); }
  void call_evicted(std::uint64_t n) { call_evictions_.fetch_add(n); }
  void cancel_latency(double seconds);

  void requests_in_flight_add(int delta);
  void upstream_work_add(std::size_t upstream, int delta);
  // The cut attempts holding their slot until the engine has let go (a part of upstream_work):
  // what is left is tether's live work on the upstream.
  void upstream_lingering_add(std::size_t upstream, int delta);
  // Who queues attempts for a slot on this node: its budget, on a cluster member also the link
  // (waiting for a lease), elsewhere the io threads' budget shards. The budget and the link set
  // their own count; the shards, being many, add to theirs. The gauge is the sum.
  enum class queue_owner : std::uint8_t { budget, link, shards };
  void queue_depth_set(queue_owner who, std::int64_t depth) {
    queue_depth_[static_cast<std::size_t>(who)].store(depth);
  }
  void queue_depth_add(queue_owner who, std::int64_t delta) {
    queue_depth_[static_cast<std::size_t>(who)].fetch_add(delta);
  }
  void cluster_connected_set(int v) { cluster_connected_.store(v); }
  // A budget host exports the slots its budget holds for the whole cluster (leases included).
  void export_cluster_slots() { cluster_slots_exported_.store(true); }
  void cluster_slots_set(std::size_t upstream, std::int64_t n);
  std::int64_t cluster_slots(std::size_t upstream) const;
  // The token weight the budget holds on the upstream (the host's: the whole cluster's).
  void upstream_tokens_set(std::size_t upstream, std::uint64_t n);

  // The engines behind the upstreams, as their metrics polls read them
  // (actors/engine_metrics_actor.cpp). An upstream's engine series are exported only while it is
  // polled: one removed by a reload, or whose metrics_path went, has none.
  enum class engine_poll_result : std::uint8_t { ok, failed, unreadable };
  void engine_polled(std::size_t upstream, bool polled);
  void engine_poll_done(std::size_t upstream, engine_poll_result result);
  // An engine abort's end (actors/engine_abort.hpp): sent (a 2xx answer) or failed. Thread-safe:
  // counted on the io thread.
  void engine_abort_done(std::size_t upstream, bool sent);
  // What the last poll read; nullopt counts (a poll that read nothing) leave the engine's
  // requests unknown, not exported, until a poll reads them again.
  void engine_counts_set(std::size_t upstream, std::int64_t running, std::int64_t queued,
                         std::int64_t orphaned);
  void engine_counts_unknown(std::size_t upstream);
  // Whether orphaned work is exported: not on a cluster member, whose own work is only part of
  // what its engines run for the cluster.
  void export_orphaned(bool on) { export_orphaned_.store(on); }

  std::int64_t requests_in_flight() const;
  std::int64_t upstream_work(std::size_t upstream) const;
  std::int64_t upstream_lingering(std::size_t upstream) const;
  // Whether the last poll of the upstream's engine read its counts.
  bool engine_counts_known(std::size_t upstream) const;
  std::int64_t queue_depth() const {
    return queue_depth_[0].load() + queue_depth_[1].load() + queue_depth_[2].load();
  }
  std::uint64_t requests_total(const std::string& model, outcome o) const;

  std::string render() const;

 private:
  // A tokens_total series, looked up by views of its labels (token_series_less is transparent)
  // so that a request's count copies no string once its series exists.
  struct token_series {
    std::string key;
    std::string model;
    std::size_t upstream = 0;
  };
  struct token_series_view {
    std::string_view key;
    std::string_view model;
    std::size_t upstream = 0;
  };
  struct token_series_less {
    using is_transparent = void;
    static auto tied(const token_series& s) {
      return std::tuple<std::string_view, std::string_view, std::size_t>{s.key, s.model,
                                                                         s.upstream};
    }
    static auto tied(const token_series_view& s) {
      return std::tuple<std::string_view, std::string_view, std::size_t>{s.key, s.model,
                                                                         s.upstream};
    }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return tied(a) < tied(b);
    }
  };
  // prompt, completion, cached, waste tokens; spend in billionths of a dollar.
  using token_counts = std::array<std::uint64_t, 5>;

  // A thread's share of the per-request series.
  struct tally {
    mutable std::mutex mutex;
    std::map<std::pair<std::string, outcome>, std::uint64_t> requests;
    std::map<std::pair<std::string, outcome>, histogram> durations;
    std::map<token_series, token_counts, token_series_less> tokens;
    histogram queue_wait;
    std::map<std::pair<std::size_t, outcome>, std::uint64_t> attempts;
    std::map<std::size_t, std::uint64_t> stale_attempts;  // by upstream
    std::map<std::pair<std::string, route_kind>, std::uint64_t> routes;
    std::atomic<std::int64_t> requests_in_flight{0};

    void add_to(tally& sum) const;
  };
  tally& mine();
  void sum_into(tally& sum) const;  // with mutex_ held
  // render()'s steps, one per group of metric families, each with mutex_ held.
  void render_requests(std::string& out, const tally& sum) const;
  void render_attempts(std::string& out, const tally& sum) const;
  void render_in_flight(std::string& out, const tally& sum) const;
  void render_ledger(std::string& out, const tally& sum) const;
  void render_cluster(std::string& out) const;
  void render_health_and_reloads(std::string& out) const;
  void render_engines(std::string& out) const;

  const std::uint64_t id_;                // which metrics a thread's binding is to (never reused)
  const std::unique_ptr<tally> unbound_;  // the threads that did not bind themselves
  std::vector<std::string> upstreams_;
  mutable std::mutex mutex_;  // the rarer series below, and tallies_ (not what a tally holds)
  std::vector<std::unique_ptr<tally>> tallies_;  // one per bound thread; never shrinks
  std::map<std::string, std::uint64_t> rate_limited_;
  // By key name: its budgets (tokens per day, per month; spend per day, per month in
  // billionths of a dollar; 0 = none), and what the ledger counts against them, by period.
  std::map<std::string, std::array<std::uint64_t, 4>, std::less<>> key_budgets_;
  struct period_usage {
    std::uint64_t tokens = 0;
    std::uint64_t spend_nanousd = 0;
    bool set = false;  // not exported until the ledger has told it
  };
  std::map<std::string, std::array<period_usage, 2>, std::less<>> key_usage_;  // day, month
  std::vector<std::array<std::uint64_t, 2>> retries_;  // per upstream: started, budget_exhausted
  std::vector<double> late_work_;
  histogram cancel_latency_;
  // Fixed arrays of config::max_upstreams, read and written without the lock.
  std::unique_ptr<std::atomic<std::int64_t>[]> upstream_work_;
  std::unique_ptr<std::atomic<std::int64_t>[]> upstream_lingering_;
  std::array<std::atomic<std::int64_t>, 3> queue_depth_{};  // by queue_owner
  std::atomic<int> cluster_connected_{-1};  // -1: standalone, the gauge is not exported
  std::unique_ptr<std::atomic<std::int64_t>[]> cluster_slots_;
  std::atomic<bool> cluster_slots_exported_{false};
  std::unique_ptr<std::atomic<std::uint64_t>[]> upstream_tokens_;
  std::array<std::uint64_t, 2> reloads_{};               // ok, error
  std::vector<std::array<std::uint64_t, 3>> ejections_;  // per upstream, by ejection_reason
  std::shared_ptr<const upstream_health> health_;
  std::vector<bool> retired_;  // by index, as upstreams_: removed by a reload
  struct engine_view {
    bool polled = false;
    bool known = false;  // the last poll read the engine's counts
    std::int64_t running = 0;
    std::int64_t queued = 0;
    std::int64_t orphaned = 0;
    std::array<std::uint64_t, 3> polls{};   // by engine_poll_result
    std::array<std::uint64_t, 2> aborts{};  // sent, failed
  };
  std::vector<engine_view> engines_;  // by index, as upstreams_
  std::atomic<bool> export_orphaned_{true};
  std::array<std::atomic<std::uint64_t>, 3> call_retries_{};  // by call_result
  std::atomic<std::uint64_t> call_evictions_{0};
};

}  // namespace tether
