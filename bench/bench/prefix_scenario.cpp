// Scenario 13 (issue #63): the fleet's cache. Real engines (llama-server replicas, prompt caching
// on) behind tether routing by least live work, tether routing by prompt prefix, and nginx round
// robin, interleaved. Two workloads, each a closed loop of callers streaming small answers so
// that prefill dominates: agents with long system prompts holding multi-turn conversations, and
// unique prompts of the same length. Measured per target and workload: time to first token,
// requests per minute, each replica's share, and the cache hits in the engines' own account:
// every answer's `timings` (cache_n: prompt tokens reused, prompt_n: evaluated) and each
// replica's /metrics before and after each phase (tokens predicted: its requests; prompt tokens:
// what it evaluated).
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <random>

#include <fmt/format.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include "bench/bench/percentiles.hpp"
#include "bench/bench/scenarios.hpp"

namespace tether::bench {
namespace {

namespace json = boost::json;
namespace asio = boost::asio;
namespace http = boost::beast::http;

// The shape of the load (the same for every target and phase).
struct prefix_shape {
  // 4 callers per replica of 2 slots: a queue of one behind each slot, and the bound of
  // consistent hashing with bounded loads, ⌈1.25 × 4⌉ = 5 live requests, is exactly the factor
  // times a replica's share.
  static constexpr unsigned callers_per_replica = 4;
  static constexpr unsigned turns = 4;  // per conversation; then the agent starts a new one
  static constexpr unsigned system_words = 240;
  static constexpr unsigned vocabulary = 500;
  // Small answers: the time to the first token is the prefill's.
  static constexpr unsigned max_tokens = 4;
  static constexpr const char* model = "prefix";
};

std::string fmt_share(double s) {
  return fmt::format("{:.3f}", s);
}

// A vocabulary of made-up words: the test model's tokenizer is nearly one token per character,
// so 240 words (≈ 1,550 characters) make a system prompt of ≈ 1,300 tokens.
std::vector<std::string> make_vocabulary() {
  std::mt19937_64 rng(1);
  std::vector<std::string> words;
  for (unsigned i = 0; i < prefix_shape::vocabulary; ++i) {
    std::string w;
    const auto n = std::uniform_int_distribution<unsigned>(3, 8)(rng);
    for (unsigned k = 0; k < n; ++k) {
      w.push_back(static_cast<char>('a' + std::uniform_int_distribution<int>(0, 25)(rng)));
    }
    words.push_back(std::move(w));
  }
  return words;
}

std::string text_of(const std::vector<std::string>& vocabulary, std::uint64_t seed,
                    unsigned words) {
  std::mt19937_64 rng(seed);
  std::string out;
  for (unsigned i = 0; i < words; ++i) {
    if (i > 0) out.push_back(' ');
    out += vocabulary[std::uniform_int_distribution<std::size_t>(0, vocabulary.size() - 1)(rng)];
  }
  return out;
}

enum class workload { shared_prefix, unique };
const char* name_of(workload w) {
  return w == workload::shared_prefix ? "shared_prefix" : "unique";
}

struct answer {
  std::string target;
  workload w = workload::shared_prefix;
  bool ok = false;
  unsigned status = 0;
  std::optional<double> ttft_ms;  // send -> the first event carrying a token
  double latency_ms = 0;
  std::optional<double> cache_n, prompt_n;  // the engine's timings (last event)
  std::string replica;                      // the engine's name for itself (its --alias)
  steady::time_point sent;
};

// Reads one SSE event of a chat stream: the token text of its delta, and the final timings.
void read_event(std::string_view event, std::string& content, bool& token, answer& a) {
  const auto start = event.find('{');
  if (start == std::string_view::npos) return;
  boost::system::error_code ec;
  auto v = json::parse(event.substr(start), ec);
  if (ec || !v.is_object()) return;
  const auto& o = v.as_object();
  if (const auto* m = o.if_contains("model"); m && m->is_string() && a.replica.empty()) {
    a.replica = m->as_string();
  }
  if (const auto* choices = o.if_contains("choices"); choices && choices->is_array()) {
    for (const auto& c : choices->as_array()) {
      const auto* delta = c.as_object().if_contains("delta");
      if (delta == nullptr || !delta->is_object()) continue;
      const auto* text = delta->as_object().if_contains("content");
      if (text != nullptr && text->is_string()) {
        token = true;
        content += text->as_string();
      }
    }
  }
  if (const auto* t = o.if_contains("timings"); t && t->is_object()) {
    if (const auto* c = t->as_object().if_contains("cache_n")) a.cache_n = c->to_number<double>();
    if (const auto* p = t->as_object().if_contains("prompt_n")) {
      a.prompt_n = p->to_number<double>();
    }
  }
}

// One caller of a closed loop: an agent's conversations (each turn the whole history, the
// agent's system prompt first), or a unique prompt every time.
struct caller : std::enable_shared_from_this<caller> {
  bench_context& ctx;
  const target& t;
  workload w;
  const std::vector<std::string>& vocabulary;
  std::string system;  // the agent's (shared_prefix)
  std::uint64_t seed;  // this caller's texts
  std::uint64_t drawn = 0;
  json::array history;  // the conversation so far (shared_prefix)
  unsigned turn = 0;
  steady::time_point stop_at;
  std::vector<answer>& answers;
  std::shared_ptr<client_connection> conn;
  bool in_flight = false;

  caller(bench_context& c, const target& tt, workload ww, const std::vector<std::string>& v,
         std::string sys, std::uint64_t s, steady::time_point stop, std::vector<answer>& a)
      : ctx(c),
        t(tt),
        w(ww),
        vocabulary(v),
        system(std::move(sys)),
        seed(s),
        stop_at(stop),
        answers(a) {}

  // The phase's time is up and this request is still running: it is left, not counted.
  void cut() {
    stop_at = steady::now();
    if (!in_flight) return;
    conn->abort();
    in_flight = false;
  }

  void start() {
    if (steady::now() >= stop_at) return;
    json::array messages;
    if (w == workload::shared_prefix) {
      if (turn == prefix_shape::turns) {
        turn = 0;
        history.clear();
      }
      history.push_back(json::object{{"role", "user"},
                                     {"content", text_of(vocabulary, seed * 1000 + drawn++, 6)}});
      messages.push_back(json::object{{"role", "system"}, {"content", system}});
      for (const auto& m : history) messages.push_back(m);
    } else {
      messages.push_back(json::object{
          {"role", "system"},
          {"content", text_of(vocabulary, seed * 1000 + drawn++, prefix_shape::system_words)}});
      messages.push_back(json::object{{"role", "user"}, {"content", "go on"}});
    }
    const json::object body{{"model", prefix_shape::model},
                            {"stream", true},
                            {"max_tokens", prefix_shape::max_tokens},
                            {"messages", std::move(messages)}};
    auto req =
        make_request(t.endpoint.address().to_string() + ":" + std::to_string(t.endpoint.port()),
                     "/v1/chat/completions", json::serialize(body));
    // A new connection per request: llama-server closes a connection after a streamed answer.
    conn = std::make_shared<client_connection>(ctx.ioc(), t.endpoint);
    in_flight = true;
    const double sent = epoch_ms_now();
    auto content = std::make_shared<std::string>();
    auto a = std::make_shared<answer>();
    a->target = t.name;
    a->w = w;
    a->sent = steady::now();
    conn->on_event([a, content, sent](std::string_view event, double read_epoch) {
      bool token = false;
      read_event(event, *content, token, *a);
      if (token && !a->ttft_ms) a->ttft_ms = read_epoch - sent;
    });
    auto self = shared_from_this();
    conn->exchange(req, [self, a, content](exchange_result& r) {
      a->ok = r.ok && r.status == 200;
      a->status = r.status;
      a->latency_ms = r.latency_ms;
      self->answers.push_back(*a);
      if (self->w == workload::shared_prefix) {
        self->history.push_back(json::object{{"role", "assistant"}, {"content", *content}});
        ++self->turn;
      }
      self->in_flight = false;
      self->start();
    });
  }
};

// A replica's counters from its /metrics (GET, between phases: the engine is idle then).
struct engine_counters {
  double predicted = 0;  // llamacpp:tokens_predicted_total
  double prompt = 0;     // llamacpp:prompt_tokens_total: prompt tokens evaluated (cached ones not)
};

// GET /metrics (between phases: nothing else is in flight then).
std::optional<std::string> read_metrics(const tcp::endpoint& ep) {
  try {
    asio::io_context ioc;
    boost::beast::tcp_stream stream(ioc);
    stream.expires_after(std::chrono::seconds(5));
    stream.connect(ep);
    http::request<http::empty_body> req{http::verb::get, "/metrics", 11};
    req.set(http::field::host, ep.address().to_string());
    http::write(stream, req);
    boost::beast::flat_buffer buffer;
    http::response<http::string_body> res;
    http::read(stream, buffer, res);
    if (res.result_int() != 200) return std::nullopt;
    return std::move(res.body());
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The sum of a metric's samples whose line starts with `prefix` and holds `label` (Prometheus
// text: `name{labels} value`).
double metric_sum(const std::string& text, std::string_view prefix, std::string_view label = "") {
  double sum = 0;
  std::size_t at = 0;
  while (at < text.size()) {
    auto end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + at, end - at);
    if (line.starts_with(prefix) && (label.empty() || line.find(label) != std::string_view::npos)) {
      const auto space = line.rfind(' ');
      if (space != std::string_view::npos) sum += std::stod(std::string(line.substr(space + 1)));
    }
    at = end + 1;
  }
  return sum;
}

std::optional<engine_counters> read_counters(const tcp::endpoint& ep) {
  auto text = read_metrics(ep);
  if (!text) return std::nullopt;
  return engine_counters{metric_sum(*text, "llamacpp:tokens_predicted_total "),
                         metric_sum(*text, "llamacpp:prompt_tokens_total ")};
}

// A tether node's routing decisions for the bench's model, by kind.
constexpr std::array<const char*, 3> decision_kinds{"prefix_home", "prefix_spill", "least_work"};
std::optional<std::array<double, 3>> read_decisions(const target& t) {
  if (t.name == "nginx") return std::nullopt;  // its /metrics would be a replica's
  auto text = read_metrics(t.endpoint);
  if (!text) return std::nullopt;
  std::array<double, 3> out{};
  for (std::size_t i = 0; i < decision_kinds.size(); ++i) {
    out[i] = metric_sum(*text, "tether_route_decisions_total{",
                        std::string("kind=\"") + decision_kinds[i] + "\"");
  }
  return out;
}

struct figures {
  std::vector<answer> answers;  // those sent after the warm-up
  std::size_t warmup_answers = 0;
  double window_ms = 0;  // the phases' measured windows: the warm-up's end to the last answer
  // The engines' counters over whole phases (warm-ups included).
  std::vector<double> replica_requests, replica_prompt_evaluated;
  bool counters_read = true;
  std::optional<std::array<double, 3>> decisions;  // tether's, over whole phases
};

}  // namespace

boost::json::object run_prefix(bench_context& ctx) {
  const auto& replicas = ctx.options().engine_replicas;
  if (replicas.empty()) return {{"name", "prefix"}, {"skipped", "no --engine-replica"}};
  const bool quick = ctx.options().quick;
  // Two rounds even when quick: the machine's load drifts, and interleaving twice halves what a
  // drift during one target's phase does to its figures.
  const std::size_t rounds = quick ? 2 : 3;
  const milliseconds phase(quick ? 12000 : 30000);
  // The agents' first turns: each agent's prefix is in no cache yet, whatever the routing, and a
  // fleet serving agents all day rarely sees that. Answers sent before its end are not counted.
  const milliseconds warmup(quick ? 10000 : 20000);
  const double factor = ctx.options().prefix_load_factor;
  const auto vocabulary = make_vocabulary();
  const auto callers_n = static_cast<unsigned>(prefix_shape::callers_per_replica * replicas.size());

  std::map<std::pair<std::string, workload>, figures> figs;
  std::uint64_t phase_number = 0;
  for (std::size_t r = 0; r < rounds && !ctx.out_of_time(); ++r) {
    for (const workload w : {workload::shared_prefix, workload::unique}) {
      for (const auto* t : ctx.rotation(r)) {
        // Fresh agents (texts of their own) every phase: no phase finds its prefixes cached by
        // an earlier one, and every target gets agents of the same shape.
        ++phase_number;
        auto& f = figs[{t->name, w}];
        f.replica_requests.resize(replicas.size());
        f.replica_prompt_evaluated.resize(replicas.size());
        std::vector<std::optional<engine_counters>> before;
        for (const auto& ep : replicas) before.push_back(read_counters(ep));
        const auto decisions_before = read_decisions(*t);
        std::vector<std::shared_ptr<caller>> callers;
        const auto started = steady::now();
        const auto counted_from =
            started + (w == workload::shared_prefix ? warmup : milliseconds(0));
        const auto stop_at = counted_from + phase;
        std::vector<answer> answers;
        for (unsigned i = 0; i < callers_n; ++i) {
          const std::uint64_t seed = phase_number * 100 + i;
          std::string system = w == workload::shared_prefix
                                   ? text_of(vocabulary, seed, prefix_shape::system_words)
                                   : std::string();
          callers.push_back(std::make_shared<caller>(ctx, *t, w, vocabulary, std::move(system),
                                                     seed, stop_at, answers));
          callers.back()->start();
        }
        ctx.run_until(
            [&] {
              return steady::now() >= stop_at &&
                     std::none_of(callers.begin(), callers.end(),
                                  [](const auto& c) { return c->in_flight; });
            },
            warmup + phase + milliseconds(60000));
        for (auto& c : callers) c->cut();
        f.window_ms += ms_between(counted_from, steady::now());
        if (const auto after = read_decisions(*t); after && decisions_before) {
          if (!f.decisions) f.decisions.emplace();
          for (std::size_t i = 0; i < after->size(); ++i) {
            (*f.decisions)[i] += (*after)[i] - (*decisions_before)[i];
          }
        }
        for (auto& a : answers) {
          if (a.sent >= counted_from) {
            f.answers.push_back(std::move(a));
          } else {
            ++f.warmup_answers;
          }
        }
        for (std::size_t k = 0; k < replicas.size(); ++k) {
          auto after = read_counters(replicas[k]);
          if (!before[k] || !after) {
            f.counters_read = false;
            continue;
          }
          f.replica_requests[k] += (after->predicted - before[k]->predicted) /
                                   static_cast<double>(prefix_shape::max_tokens);
          f.replica_prompt_evaluated[k] += after->prompt - before[k]->prompt;
        }
        ctx.pause(milliseconds(200));
      }
    }
  }

  json::object targets;
  std::map<std::pair<std::string, workload>, double> p50, rpm, max_share;
  for (const auto& [key, f] : figs) {
    std::vector<double> ttft;
    std::size_t ok = 0, failed = 0;
    double cached = 0, evaluated = 0;
    std::size_t with_timings = 0;
    // Each answer names the replica that computed it (the engine's --alias replica-<k>).
    std::vector<double> served(replicas.size(), 0), served_cached(replicas.size(), 0),
        served_prompt(replicas.size(), 0), live_ms(replicas.size(), 0);
    double live_total = 0;
    std::size_t unattributed = 0;
    json::object statuses;
    for (const auto& a : f.answers) {
      if (!a.ok || !a.ttft_ms) {
        ++failed;
        const auto code = std::to_string(a.status);
        statuses[code] = (statuses.contains(code) ? statuses[code].to_number<double>() : 0) + 1;
        continue;
      }
      ++ok;
      ttft.push_back(*a.ttft_ms);
      std::optional<std::size_t> k;
      for (std::size_t i = 0; i < replicas.size(); ++i) {
        if (a.replica == "replica-" + std::to_string(i)) k = i;
      }
      live_total += a.latency_ms;
      if (k) {
        ++served[*k];
        live_ms[*k] += a.latency_ms;
      } else {
        ++unattributed;
      }
      if (a.cache_n && a.prompt_n) {
        ++with_timings;
        cached += *a.cache_n;
        evaluated += *a.prompt_n;
        if (k) {
          served_cached[*k] += *a.cache_n;
          served_prompt[*k] += *a.cache_n + *a.prompt_n;
        }
      }
    }
    const auto s = summarize(ttft);
    json::array shares, live_shares, cached_by_replica, engine_requests,
        engine_evaluated_by_replica;
    double top = 0;
    for (std::size_t k = 0; k < replicas.size(); ++k) {
      const double share = ok > 0 ? served[k] / static_cast<double>(ok) : 0;
      shares.push_back(std::round(share * 1000) / 1000);
      // The bound of consistent hashing with bounded loads is on live work: a replica's share
      // of the time requests were in flight. (A fast replica of cached prefixes answers more
      // requests within the same live work.)
      const double live = live_total > 0 ? live_ms[k] / live_total : 0;
      top = std::max(top, live);
      live_shares.push_back(std::round(live * 1000) / 1000);
      cached_by_replica.push_back(
          served_prompt[k] > 0 ? std::round(served_cached[k] / served_prompt[k] * 1000) / 1000 : 0);
      engine_requests.push_back(f.replica_requests[k]);
      engine_evaluated_by_replica.push_back(f.replica_prompt_evaluated[k]);
    }
    p50[key] = s.p50;
    rpm[key] = f.window_ms > 0 ? static_cast<double>(ok) / f.window_ms * 60000 : 0;
    max_share[key] = unattributed == 0 ? top : 1;
    json::object decisions;
    if (f.decisions) {
      for (std::size_t i = 0; i < decision_kinds.size(); ++i) {
        decisions[decision_kinds[i]] = (*f.decisions)[i];
      }
    }
    auto& per_target = targets[key.first];
    if (!per_target.is_object()) per_target = json::object{};
    per_target.as_object()[name_of(key.second)] = json::object{
        {"answered", ok},
        {"failed", failed},
        {"failed_statuses", std::move(statuses)},
        {"warmup_answers_not_counted", f.warmup_answers},
        {"ttft_ms", to_json(s)},
        {"requests_per_minute", std::round(rpm[key] * 10) / 10},
        {"window_ms_total", std::round(f.window_ms)},
        // The engines' account: every answer's timings and the replica it names...
        {"answers_with_timings", with_timings},
        {"prompt_tokens_cached", cached},
        {"prompt_tokens_evaluated", evaluated},
        {"cached_share",
         cached + evaluated > 0 ? std::round(cached / (cached + evaluated) * 1000) / 1000 : 0},
        {"replica_share", std::move(shares)},
        {"replica_live_work_share", std::move(live_shares)},
        {"replica_cached_share", std::move(cached_by_replica)},
        {"answers_naming_no_replica", unattributed},
        {"max_replica_live_work_share", std::round(top * 1000) / 1000},
        // ... and the replicas' counters over the whole phases, warm-ups included.
        {"engine_counters_read", f.counters_read},
        // tether's own account (tether_route_decisions_total, whole phases).
        {"route_decisions", std::move(decisions)},
        {"engine_requests_by_replica", std::move(engine_requests)},
        {"engine_prompt_tokens_evaluated_by_replica", std::move(engine_evaluated_by_replica)}};
  }

  // The goals. A missing arm (a build without routing = "prefix") misses them all.
  json::array checks;
  const double fair = 1.0 / static_cast<double>(replicas.size());
  auto has = [&](const std::string& t, workload w) {
    auto it = figs.find({t, w});
    return it != figs.end() && p50[{t, w}] > 0;
  };
  const auto shared = workload::shared_prefix;
  const bool both_shared = has("prefix", shared) && has("least_work", shared);
  const double speedup = both_shared ? p50[{"least_work", shared}] / p50[{"prefix", shared}] : 0;
  checks.push_back(check("prefix", "shared prefix: least_work p50 TTFT / prefix p50 TTFT", speedup,
                         ">= 3", both_shared && speedup >= 3));
  for (const workload w : {workload::shared_prefix, workload::unique}) {
    const bool here = has("prefix", w);
    const double top = here ? max_share[{"prefix", w}] : 1;
    checks.push_back(
        check("prefix", std::string(name_of(w)) + ": busiest replica's share of the live work", top,
              "<= prefix_load_factor x " + fmt_share(fair) + " (" + fmt_share(factor * fair) + ")",
              here && top <= factor * fair + 1e-9));
  }
  const auto unique = workload::unique;
  const bool both_unique = has("prefix", unique) && has("least_work", unique);
  const double slower = both_unique ? p50[{"prefix", unique}] / p50[{"least_work", unique}] : 0;
  checks.push_back(check("prefix", "unique prompts: prefix p50 TTFT / least_work p50 TTFT", slower,
                         "<= 1.10", both_unique && slower <= 1.10));
  const double fewer = both_unique && rpm[{"least_work", unique}] > 0
                           ? rpm[{"prefix", unique}] / rpm[{"least_work", unique}]
                           : 0;
  checks.push_back(check("prefix", "unique prompts: prefix rpm / least_work rpm", fewer, ">= 0.90",
                         both_unique && fewer >= 0.90));

  json::array replica_names;
  for (const auto& ep : replicas) {
    replica_names.push_back(
        json::string(ep.address().to_string() + ":" + std::to_string(ep.port())));
  }
  return {{"name", "prefix"},
          {"config",
           {{"replicas", std::move(replica_names)},
            {"callers", callers_n},
            {"turns_per_conversation", prefix_shape::turns},
            {"system_prompt_words", prefix_shape::system_words},
            {"max_tokens", prefix_shape::max_tokens},
            {"rounds", rounds},
            {"phase_ms", phase.count()},
            {"shared_prefix_warmup_ms", warmup.count()},
            {"prefix_load_factor", factor}}},
          {"targets", std::move(targets)},
          {"checks", std::move(checks)}};
}

}  // namespace tether::bench
