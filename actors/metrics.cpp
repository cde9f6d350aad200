#include "actors/metrics.hpp"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include <memory>

#include "actors/policy/ledger/model_price.hpp"

namespace tether {

namespace {
std::string escape_label(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

// Billionths of a dollar as an exact decimal number of dollars ("1.5", "0.000000001"): a float
// would print a sum of many small spends with a rounding error.
std::string usd_of(std::uint64_t nanousd) {
  constexpr std::uint64_t per_usd = 1'000'000'000;
  auto text = fmt::format("{}.{:09}", nanousd / per_usd, nanousd % per_usd);
  while (text.back() == '0') text.pop_back();
  if (text.back() == '.') text.pop_back();
  return text;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

// A thread's tally, and which metrics object it belongs to (by id, not address: a test's next
// metrics may be allocated where the last one was).
std::atomic<std::uint64_t> next_metrics_id{1};
thread_local std::uint64_t bound_id = 0;
thread_local void* bound_tally = nullptr;
}  // namespace

void histogram::observe(double seconds) {
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    if (seconds <= bounds[i]) ++counts_[i];
  }
  ++count_;
  sum_ += seconds;
}

histogram& histogram::operator+=(const histogram& other) {
  for (std::size_t i = 0; i < bounds.size(); ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  sum_ += other.sum_;
  return *this;
}

void histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  auto sep = labels.empty() ? "" : ",";
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    out += fmt::format("{}_bucket{{{}{}le=\"{}\"}} {}\n", name, labels, sep, bounds[i], counts_[i]);
  }
  out += fmt::format("{}_bucket{{{}{}le=\"+Inf\"}} {}\n", name, labels, sep, count_);
  auto braces = labels.empty() ? std::string{} : "{" + labels + "}";
  out += fmt::format("{}_sum{} {}\n{}_count{} {}\n", name, braces, sum_, name, braces, count_);
}

metrics::metrics(std::vector<std::string> upstream_names)
    : id_(next_metrics_id.fetch_add(1)),
      unbound_(std::make_unique<tally>()),
      upstream_work_(std::make_unique<std::atomic<std::int64_t>[]>(config::max_upstreams)),
      upstream_lingering_(std::make_unique<std::atomic<std::int64_t>[]>(config::max_upstreams)),
      cluster_slots_(std::make_unique<std::atomic<std::int64_t>[]>(config::max_upstreams)),
      upstream_tokens_(std::make_unique<std::atomic<std::uint64_t>[]>(config::max_upstreams)) {
  for (std::size_t i = 0; i < config::max_upstreams; ++i) {
    upstream_work_[i].store(0);
    upstream_lingering_[i].store(0);
    cluster_slots_[i].store(0);
    upstream_tokens_[i].store(0);
  }
  name_upstreams(std::move(upstream_names));
}

metrics::~metrics() = default;

void metrics::bind_this_thread() {
  if (bound_id == id_) return;
  std::lock_guard lock{mutex_};
  tallies_.push_back(std::make_unique<tally>());
  bound_tally = tallies_.back().get();
  bound_id = id_;
}

metrics::tally& metrics::mine() {
  return bound_id == id_ ? *static_cast<tally*>(bound_tally) : *unbound_;
}

void metrics::tally::add_to(tally& sum) const {
  std::lock_guard lock{mutex};
  for (const auto& [k, v] : requests) sum.requests[k] += v;
  for (const auto& [k, h] : durations) sum.durations[k] += h;
  for (const auto& [k, t] : tokens) {
    auto& s = sum.tokens[k];
    for (std::size_t i = 0; i < s.size(); ++i) s[i] += t[i];
  }
  sum.queue_wait += queue_wait;
  for (const auto& [k, v] : attempts) sum.attempts[k] += v;
  for (const auto& [k, v] : stale_attempts) sum.stale_attempts[k] += v;
  for (const auto& [k, v] : routes) sum.routes[k] += v;
  sum.requests_in_flight.fetch_add(requests_in_flight.load(std::memory_order_relaxed),
                                   std::memory_order_relaxed);
}

void metrics::sum_into(tally& sum) const {
  unbound_->add_to(sum);
  for (const auto& t : tallies_) t->add_to(sum);
}

void metrics::name_upstreams(std::vector<std::string> names) {
  std::lock_guard lock{mutex_};
  if (names.size() > config::max_upstreams) names.resize(config::max_upstreams);
  // Indices only grow: a removed upstream keeps its place and its series.
  for (std::size_t i = upstreams_.size(); i < names.size(); ++i) {
    upstreams_.push_back(names[i]);
    retries_.push_back({0, 0});
    late_work_.push_back(0.0);
    ejections_.push_back({0, 0, 0});
    engines_.emplace_back();
  }
}

void metrics::retire_upstreams(std::vector<bool> retired) {
  std::lock_guard lock{mutex_};
  retired_ = std::move(retired);
}

void metrics::watch_health(std::shared_ptr<const upstream_health> health) {
  std::lock_guard lock{mutex_};
  health_ = std::move(health);
}

void metrics::upstream_ejected(std::size_t upstream, ejection_reason why) {
  std::lock_guard lock{mutex_};
  if (upstream < ejections_.size()) ++ejections_[upstream][static_cast<std::size_t>(why)];
}

void metrics::engine_polled(std::size_t upstream, bool polled) {
  std::lock_guard lock{mutex_};
  if (upstream >= engines_.size()) return;
  auto& e = engines_[upstream];
  e.polled = polled;
  if (!polled) e.known = false;
}

void metrics::engine_poll_done(std::size_t upstream, engine_poll_result result) {
  std::lock_guard lock{mutex_};
  if (upstream < engines_.size()) ++engines_[upstream].polls[static_cast<std::size_t>(result)];
}

void metrics::engine_abort_done(std::size_t upstream, bool sent) {
  std::lock_guard lock{mutex_};
  if (upstream < engines_.size()) ++engines_[upstream].aborts[sent ? 0 : 1];
}

void metrics::engine_counts_set(std::size_t upstream, std::int64_t running, std::int64_t queued,
                                std::int64_t orphaned) {
  std::lock_guard lock{mutex_};
  if (upstream >= engines_.size()) return;
  auto& e = engines_[upstream];
  e.known = true;
  e.running = running;
  e.queued = queued;
  e.orphaned = orphaned;
}

void metrics::engine_counts_unknown(std::size_t upstream) {
  std::lock_guard lock{mutex_};
  if (upstream < engines_.size()) engines_[upstream].known = false;
}

void metrics::config_reloaded(bool ok) {
  std::lock_guard lock{mutex_};
  ++reloads_[ok ? 0 : 1];
}

void metrics::request_done(const std::string& model, outcome o, double seconds) {
  auto& t = mine();
  std::lock_guard lock{t.mutex};
  ++t.requests[{model, o}];
  t.durations[{model, o}].observe(seconds);
}

void metrics::route_decided(const std::string& model, route_kind kind) {
  auto& t = mine();
  std::lock_guard lock{t.mutex};
  ++t.routes[{model, kind}];
}

void metrics::requests_in_flight_add(int delta) {
  mine().requests_in_flight.fetch_add(delta, std::memory_order_relaxed);
}

std::int64_t metrics::requests_in_flight() const {
  std::lock_guard lock{mutex_};
  tally sum;
  sum_into(sum);
  return sum.requests_in_flight.load();
}

void metrics::rate_limited(const std::string& key) {
  std::lock_guard lock{mutex_};
  ++rate_limited_[key];
}

void metrics::tokens_used(const std::string& key, std::size_t upstream, const std::string& model,
                          const ledger::usage_record& r) {
  auto& mine_now = mine();
  std::lock_guard lock{mine_now.mutex};
  auto& series = mine_now.tokens;
  const token_series_view at{key, model, upstream};
  auto it = series.lower_bound(at);
  if (it == series.end() || token_series_less{}(at, it->first))
    it = series.emplace_hint(it, token_series{key, model, upstream}, token_counts{});
  auto& t = it->second;
  t[0] += r.prompt;
  t[1] += r.completion;
  t[2] += r.cached;
  t[3] += r.waste;
  t[4] += r.spend_nanousd;
}

void metrics::key_budgets_set(const std::vector<config::key_config>& keys) {
  std::lock_guard lock{mutex_};
  key_budgets_.clear();
  for (const auto& k : keys) {
    if (k.retired) continue;
    const std::array<std::uint64_t, 4> b{k.max_tokens_per_day, k.max_tokens_per_month,
                                         ledger::usd_to_nanousd(k.max_spend_per_day),
                                         ledger::usd_to_nanousd(k.max_spend_per_month)};
    if (b != std::array<std::uint64_t, 4>{}) key_budgets_[k.name] = b;
  }
}

void metrics::key_usage_set(const std::string& key, bool month, std::uint64_t tokens,
                            std::uint64_t spend_nanousd) {
  std::lock_guard lock{mutex_};
  auto it = key_usage_.find(key);
  if (it == key_usage_.end()) it = key_usage_.emplace(key, std::array<period_usage, 2>{}).first;
  it->second[month ? 1 : 0] = {tokens, spend_nanousd, true};
}

void metrics::queue_wait(double seconds) {
  auto& t = mine();
  std::lock_guard lock{t.mutex};
  t.queue_wait.observe(seconds);
}

void metrics::attempt_done(std::size_t upstream, outcome o, bool stale) {
  auto& t = mine();
  std::lock_guard lock{t.mutex};
  if (stale) {
    ++t.stale_attempts[upstream];
    return;
  }
  ++t.attempts[{upstream, o}];
}

void metrics::retry_decided(std::size_t upstream, bool started) {
  std::lock_guard lock{mutex_};
  if (upstream < retries_.size()) ++retries_[upstream][started ? 0 : 1];
}

void metrics::late_work(std::size_t upstream, double seconds) {
  std::lock_guard lock{mutex_};
  if (upstream < late_work_.size()) late_work_[upstream] += seconds;
}

void metrics::cancel_latency(double seconds) {
  std::lock_guard lock{mutex_};
  cancel_latency_.observe(seconds);
}

void metrics::upstream_work_add(std::size_t upstream, int delta) {
  if (upstream < config::max_upstreams) upstream_work_[upstream].fetch_add(delta);
}

void metrics::upstream_lingering_add(std::size_t upstream, int delta) {
  if (upstream < config::max_upstreams) upstream_lingering_[upstream].fetch_add(delta);
}

void metrics::cluster_slots_set(std::size_t upstream, std::int64_t n) {
  if (upstream < config::max_upstreams) cluster_slots_[upstream].store(n);
}

void metrics::upstream_tokens_set(std::size_t upstream, std::uint64_t n) {
  if (upstream < config::max_upstreams) upstream_tokens_[upstream].store(n);
}

std::int64_t metrics::cluster_slots(std::size_t upstream) const {
  return upstream < config::max_upstreams ? cluster_slots_[upstream].load() : 0;
}

std::int64_t metrics::upstream_work(std::size_t upstream) const {
  return upstream < config::max_upstreams ? upstream_work_[upstream].load() : 0;
}

std::int64_t metrics::upstream_lingering(std::size_t upstream) const {
  return upstream < config::max_upstreams ? upstream_lingering_[upstream].load() : 0;
}

bool metrics::engine_counts_known(std::size_t upstream) const {
  std::lock_guard lock{mutex_};
  return upstream < engines_.size() && engines_[upstream].known;
}

std::uint64_t metrics::requests_total(const std::string& model, outcome o) const {
  std::lock_guard lock{mutex_};
  tally sum;
  sum_into(sum);
  auto it = sum.requests.find({model, o});
  return it == sum.requests.end() ? 0 : it->second;
}

std::string metrics::render() const {
  std::string out;
  out.reserve(8192);
  std::lock_guard lock{mutex_};
  tally sum;  // every thread's, each read under its own lock in turn
  sum_into(sum);
  render_requests(out, sum);
  render_ledger(out, sum);
  render_attempts(out, sum);
  render_in_flight(out, sum);
  render_cluster(out);
  render_health_and_reloads(out);
  render_engines(out);
  return out;
}

// The callers' side: requests by outcome, their durations, rate refusals, tokens used.
void metrics::render_requests(std::string& out, const tally& sum) const {
  header(out, "tether_requests_total", "counter", "Model requests by final outcome.");
  for (const auto& [k, v] : sum.requests) {
    out += fmt::format("tether_requests_total{{model=\"{}\",outcome=\"{}\"}} {}\n",
                       escape_label(k.first), to_string(k.second), v);
  }
  header(out, "tether_request_duration_seconds", "histogram",
         "Time from arrival to the end of the response, by final outcome.");
  for (const auto& [k, h] : sum.durations) {
    h.render(
        out, "tether_request_duration_seconds",
        fmt::format("model=\"{}\",outcome=\"{}\"", escape_label(k.first), to_string(k.second)));
  }
  header(out, "tether_route_decisions_total", "counter",
         "Attempts' deployments chosen on models with routing = \"prefix\", by how.");
  for (const auto& [k, v] : sum.routes) {
    out += fmt::format("tether_route_decisions_total{{model=\"{}\",kind=\"{}\"}} {}\n",
                       escape_label(k.first), to_string(k.second), v);
  }
  header(out, "tether_rate_limited_total", "counter",
         "Requests refused by their key's rpm or tpm (429 rate_limited), by key name.");
  for (const auto& [key, n] : rate_limited_)
    out += fmt::format("tether_rate_limited_total{{key=\"{}\"}} {}\n", escape_label(key), n);
  header(out, "tether_call_retries_total", "counter",
         "Clients' retries of a call that did not end ok, given what was left of its deadline "
         "(served) or nothing (out_of_budget: 504 at once, no upstream attempt), or whose "
         "attempts its earlier tries spent (out_of_attempts: their last answer at once, no "
         "upstream attempt).");
  out += fmt::format(
      "tether_call_retries_total{{result=\"served\"}} {}\n"
      "tether_call_retries_total{{result=\"out_of_budget\"}} {}\n"
      "tether_call_retries_total{{result=\"out_of_attempts\"}} {}\n",
      call_retries_[0].load(), call_retries_[1].load(), call_retries_[2].load());
  header(out, "tether_call_table_evictions_total", "counter",
         "Unsuccessful calls forgotten inside their call_window_ms: the table was full.");
  out += fmt::format("tether_call_table_evictions_total {}\n", call_evictions_.load());
}

// The ledger's view: what the requests used by key, upstream and model, what they cost, and the
// keys' budgets beside what the ledger counts against them.
void metrics::render_ledger(std::string& out, const tally& sum) const {
  header(out, "tether_tokens_total", "counter",
         "Tokens requests used, by key name, upstream, model and kind: prompt, completion (what "
         "the caller received), cached (the part of the prompt read from the upstream's cache), "
         "waste (generated after the caller left).");
  // A key and model's spend, whatever upstream served it.
  std::map<std::pair<std::string_view, std::string_view>, std::uint64_t> spend;
  for (const auto& [k, t] : sum.tokens) {
    spend[{k.key, k.model}] += t[4];
    if (k.upstream >= upstreams_.size()) continue;
    const auto labels = fmt::format("key=\"{}\",upstream=\"{}\",model=\"{}\"", escape_label(k.key),
                                    escape_label(upstreams_[k.upstream]), escape_label(k.model));
    out += fmt::format(
        "tether_tokens_total{{{0},kind=\"prompt\"}} {1}\n"
        "tether_tokens_total{{{0},kind=\"completion\"}} {2}\n"
        "tether_tokens_total{{{0},kind=\"cached\"}} {3}\n"
        "tether_tokens_total{{{0},kind=\"waste\"}} {4}\n",
        labels, t[0], t[1], t[2], t[3]);
  }
  header(out, "tether_spend_usd_total", "counter",
         "What requests cost at their model's prices, in USD, by key name and model.");
  for (const auto& [k, nanousd] : spend) {
    out += fmt::format("tether_spend_usd_total{{key=\"{}\",model=\"{}\"}} {}\n",
                       escape_label(k.first), escape_label(k.second), usd_of(nanousd));
  }
  header(out, "tether_key_budget", "gauge",
         "A key's configured budget for the UTC day or month, in tokens (prompt + completion) or "
         "USD; absent where the key has none.");
  static constexpr std::array<std::pair<const char*, const char*>, 4> budget_labels{
      {{"day", "tokens"}, {"month", "tokens"}, {"day", "usd"}, {"month", "usd"}}};
  for (const auto& [key, b] : key_budgets_) {
    const auto name = escape_label(key);
    for (std::size_t i = 0; i < b.size(); ++i) {
      if (b[i] == 0) continue;
      const auto value = i < 2 ? fmt::format("{}", b[i]) : usd_of(b[i]);
      out += fmt::format("tether_key_budget{{key=\"{}\",period=\"{}\",unit=\"{}\"}} {}\n", name,
                         budget_labels[i].first, budget_labels[i].second, value);
    }
  }
  header(out, "tether_key_usage", "gauge",
         "What the ledger counts against a key's budgets in the current UTC day or month: "
         "tokens (prompt + completion) and USD.");
  for (const auto& [key, periods] : key_usage_) {
    const auto name = escape_label(key);
    for (std::size_t i = 0; i < periods.size(); ++i) {
      const auto& p = periods[i];
      if (!p.set) continue;
      const char* period = i == 0 ? "day" : "month";
      out += fmt::format(
          "tether_key_usage{{key=\"{0}\",period=\"{1}\",unit=\"tokens\"}} {2}\n"
          "tether_key_usage{{key=\"{0}\",period=\"{1}\",unit=\"usd\"}} {3}\n",
          name, period, p.tokens, usd_of(p.spend_nanousd));
    }
  }
}

// The upstream attempts: their waits for a slot, how they ended, the retries.
void metrics::render_attempts(std::string& out, const tally& sum) const {
  header(out, "tether_queue_wait_seconds", "histogram",
         "Time an attempt waited for a budget slot.");
  sum.queue_wait.render(out, "tether_queue_wait_seconds", "");
  header(out, "tether_upstream_attempts_total", "counter", "Upstream attempts by how they ended.");
  for (const auto& [k, v] : sum.attempts) {
    if (k.first >= upstreams_.size()) continue;
    out += fmt::format("tether_upstream_attempts_total{{upstream=\"{}\",outcome=\"{}\"}} {}\n",
                       escape_label(upstreams_[k.first]), to_string(k.second), v);
  }
  for (const auto& [upstream, v] : sum.stale_attempts) {
    if (upstream >= upstreams_.size()) continue;
    out += fmt::format(
        "tether_upstream_attempts_total{{upstream=\"{}\",outcome=\"stale_connection\"}} {}\n",
        escape_label(upstreams_[upstream]), v);
  }
  header(out, "tether_retries_total", "counter",
         "Retries the per-upstream retry budget started or refused.");
  for (std::size_t i = 0; i < upstreams_.size(); ++i) {
    out += fmt::format(
        "tether_retries_total{{upstream=\"{0}\",result=\"started\"}} {1}\n"
        "tether_retries_total{{upstream=\"{0}\",result=\"budget_exhausted\"}} {2}\n",
        escape_label(upstreams_[i]), retries_[i][0], retries_[i][1]);
  }
}

// What is in flight now, and what ran on after it was given up.
void metrics::render_in_flight(std::string& out, const tally& sum) const {
  header(out, "tether_requests_in_flight", "gauge", "Callers being served, queued ones included.");
  out += fmt::format("tether_requests_in_flight {}\n", sum.requests_in_flight.load());
  header(out, "tether_upstream_work_in_flight", "gauge",
         "Live upstream connections holding a budget slot.");
  for (std::size_t i = 0; i < upstreams_.size(); ++i) {
    out += fmt::format("tether_upstream_work_in_flight{{upstream=\"{}\"}} {}\n",
                       escape_label(upstreams_[i]), upstream_work_[i].load());
  }
  header(out, "tether_upstream_tokens_in_flight", "gauge",
         "Token weight the budget holds against the upstream's max_tokens_in_flight (on a budget "
         "host: the whole cluster's).");
  for (std::size_t i = 0; i < upstreams_.size(); ++i) {
    out += fmt::format("tether_upstream_tokens_in_flight{{upstream=\"{}\"}} {}\n",
                       escape_label(upstreams_[i]), upstream_tokens_[i].load());
  }
  header(out, "tether_queue_depth", "gauge", "Attempts waiting for a budget slot.");
  out += fmt::format("tether_queue_depth {}\n", queue_depth());
  header(out, "tether_late_work_seconds_total", "counter",
         "Upstream work that ran on after its caller left or its deadline passed.");
  for (std::size_t i = 0; i < upstreams_.size(); ++i) {
    out += fmt::format("tether_late_work_seconds_total{{upstream=\"{}\"}} {}\n",
                       escape_label(upstreams_[i]), late_work_[i]);
  }
  header(out, "tether_cancel_latency_seconds", "histogram",
         "From the decision to cancel to the upstream socket closed.");
  cancel_latency_.render(out, "tether_cancel_latency_seconds", "");
}

// A cluster member's link to the budget host, and the host's view of the cluster's slots.
void metrics::render_cluster(std::string& out) const {
  if (auto c = cluster_connected_.load(); c >= 0) {
    header(out, "tether_cluster_connected", "gauge", "1 while joined to the budget host.");
    out += fmt::format("tether_cluster_connected {}\n", c);
  }
  if (cluster_slots_exported_.load()) {
    header(out, "tether_cluster_slots_held", "gauge",
           "Budget host: slots held across the cluster, members' leases included.");
    for (std::size_t i = 0; i < upstreams_.size(); ++i) {
      out += fmt::format("tether_cluster_slots_held{{upstream=\"{}\"}} {}\n",
                         escape_label(upstreams_[i]), cluster_slots_[i].load());
    }
  }
}

// The upstreams' health (ejections) and the configuration's reloads.
void metrics::render_health_and_reloads(std::string& out) const {
  if (health_) {
    const auto now = std::chrono::steady_clock::now();
    header(out, "tether_upstream_healthy", "gauge",
           "1 while the upstream takes attempts; 0 while ejected, cooling down or removed.");
    for (std::size_t i = 0; i < upstreams_.size(); ++i) {
      out += fmt::format(
          "tether_upstream_healthy{{upstream=\"{}\"}} {}\n", escape_label(upstreams_[i]),
          !(i < retired_.size() && retired_[i]) && health_->available(i, now) ? 1 : 0);
    }
  }
  header(out, "tether_upstream_ejections_total", "counter",
         "Times an upstream was taken out of service, by reason.");
  for (std::size_t i = 0; i < upstreams_.size(); ++i) {
    for (auto r : {ejection_reason::failures, ejection_reason::health_check,
                   ejection_reason::rate_limited}) {
      out += fmt::format("tether_upstream_ejections_total{{upstream=\"{}\",reason=\"{}\"}} {}\n",
                         escape_label(upstreams_[i]), to_string(r),
                         ejections_[i][static_cast<std::size_t>(r)]);
    }
  }
  header(out, "tether_config_reloads_total", "counter",
         "Config reloads (SIGHUP) applied (ok) or refused (error).");
  out += fmt::format(
      "tether_config_reloads_total{{result=\"ok\"}} {}\n"
      "tether_config_reloads_total{{result=\"error\"}} {}\n",
      reloads_[0], reloads_[1]);
}

// The engines' own account of their work, for the upstreams whose metrics are polled: nothing at
// all when none is.
void metrics::render_engines(std::string& out) const {
  // Engine aborts (engine = "sglang"), for the upstreams that have had one.
  bool aborts_header = false;
  for (std::size_t i = 0; i < engines_.size(); ++i) {
    const auto& e = engines_[i];
    if (e.aborts[0] + e.aborts[1] == 0) continue;
    if (!aborts_header) {
      header(out, "tether_engine_aborts_total", "counter",
             "Engine aborts (engine = \"sglang\": POST /abort_request for a cancelled attempt): "
             "sent (a 2xx answer) or failed (none within the connect timeout, or an error).");
      aborts_header = true;
    }
    out += fmt::format(
        "tether_engine_aborts_total{{upstream=\"{0}\",result=\"sent\"}} {1}\n"
        "tether_engine_aborts_total{{upstream=\"{0}\",result=\"failed\"}} {2}\n",
        escape_label(upstreams_[i]), e.aborts[0], e.aborts[1]);
  }
  if (std::none_of(engines_.begin(), engines_.end(), [](const auto& e) { return e.polled; }))
    return;
  header(out, "tether_engine_metrics_polls_total", "counter",
         "Polls of the engine's metrics_path: ok, failed (no 2xx answer within the connect "
         "timeout) or unreadable (no sample of the running series, or a body over 4 MiB).");
  for (std::size_t i = 0; i < engines_.size(); ++i) {
    const auto& e = engines_[i];
    if (!e.polled) continue;
    const auto up = escape_label(upstreams_[i]);
    out += fmt::format(
        "tether_engine_metrics_polls_total{{upstream=\"{0}\",result=\"ok\"}} {1}\n"
        "tether_engine_metrics_polls_total{{upstream=\"{0}\",result=\"failed\"}} {2}\n"
        "tether_engine_metrics_polls_total{{upstream=\"{0}\",result=\"unreadable\"}} {3}\n",
        up, e.polls[0], e.polls[1], e.polls[2]);
  }
  header(out, "tether_engine_requests", "gauge",
         "Requests the engine reports running or queued, as its last poll read them (absent while "
         "unknown).");
  for (std::size_t i = 0; i < engines_.size(); ++i) {
    const auto& e = engines_[i];
    if (!e.polled || !e.known) continue;
    const auto up = escape_label(upstreams_[i]);
    out += fmt::format(
        "tether_engine_requests{{upstream=\"{0}\",state=\"running\"}} {1}\n"
        "tether_engine_requests{{upstream=\"{0}\",state=\"queued\"}} {2}\n",
        up, e.running, e.queued);
  }
  if (!export_orphaned_.load()) return;
  header(out, "tether_engine_orphaned_requests", "gauge",
         "Requests the engine runs or queues beyond tether's live work on the upstream, held "
         "through three polls in a row (absent while unknown).");
  for (std::size_t i = 0; i < engines_.size(); ++i) {
    const auto& e = engines_[i];
    if (!e.polled || !e.known) continue;
    out += fmt::format("tether_engine_orphaned_requests{{upstream=\"{}\"}} {}\n",
                       escape_label(upstreams_[i]), e.orphaned);
  }
}

}  // namespace tether
