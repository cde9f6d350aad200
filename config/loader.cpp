// TOML → gateway_config. The only translation unit that includes toml++ (with render.cpp
// writing TOML by hand): nothing of toml++ leaks into a header.
//
// Validation collects every error instead of stopping at the first, so an operator fixes a
// config in one round. Each error reads "<file>: <key path>: <problem>"; where the key has a
// source position, " (line N)" is appended because index-based paths (models[3]) are hard to
// find in a long file.
#include "config/loader.hpp"

#include <fmt/format.h>

#include <toml++/toml.h>
#include <boost/url/parse.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string_view>

#include "config/toml_guard.hpp"

namespace tether::config {
namespace {

// Timers are armed as now() + value; a week is longer than any request or connection should
// live and keeps every sum of deadlines far from overflowing steady_clock arithmetic.
constexpr std::int64_t max_duration_ms = 7LL * 24 * 60 * 60 * 1000;
constexpr std::int64_t u32_max = std::numeric_limits<std::uint32_t>::max();
// Token counts (caps, per-minute limits): far beyond any model server, far from overflowing a sum.
constexpr std::int64_t max_token_count = std::int64_t{1} << 48;
constexpr std::int64_t max_key_weight = 1000;
constexpr std::int64_t i64_max = std::numeric_limits<std::int64_t>::max();

const char* type_name(toml::node_type t) {
  switch (t) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

std::string join_path(std::string_view prefix, std::string_view key) {
  if (prefix.empty()) return std::string(key);
  return fmt::format("{}.{}", prefix, key);
}

// The [request] keys, accepted in [request] and (as overrides) directly in a [[models]] entry.
constexpr std::string_view request_keys[] = {
    "deadline_ms", "attempt_timeout_ms", "stream_idle_timeout_ms",
    "max_retries", "retry_backoff_ms",   "max_response_bytes",
};

struct host_port {
  std::string host;
  std::uint16_t port = 0;
};

class loader {
 public:
  loader(std::string file, const env_lookup& env) : file_(std::move(file)), env_(env) {}

  load_result run(std::string_view text) {
    // toml++ reads the text only once what it would mishandle (undefined behaviour) is gone.
    const auto input = prepare_toml_input(text);
    if (input.refused) {
      errors_.push_back(fmt::format("{}: line {}, column {}: {}", file_, input.refused->line,
                                    input.refused->column, input.refused->problem));
      return finish();
    }
    toml::table root;
    try {
      root = toml::parse(input.text, file_);
    } catch (const toml::parse_error& e) {
      const auto& pos = e.source().begin;
      errors_.push_back(fmt::format("{}: line {}, column {}: TOML syntax error: {}", file_,
                                    pos.line, pos.column, e.description()));
      return finish();
    }
    cfg_.source_file = file_;
    check_keys(
        root, "",
        {"server", "request", "budget", "upstreams", "models", "keys", "telemetry", "cluster"});
    if (auto* t = table_at(root, "server", "")) read_server(*t);
    if (auto* t = table_at(root, "request", "")) read_request(*t);
    if (auto* t = table_at(root, "budget", "")) read_budget(*t);
    read_upstreams(root);
    read_models(root);
    read_keys(root);
    if (auto* t = table_at(root, "telemetry", "")) read_telemetry(*t);
    if (auto* t = table_at(root, "cluster", "")) read_cluster(*t);
    apply_env_overrides();
    return finish();
  }

 private:
  load_result finish() {
    load_result r;
    r.errors = std::move(errors_);
    if (r.errors.empty()) r.config = std::move(cfg_);
    return r;
  }

  void error(std::string_view path, std::string_view problem, const toml::source_region* at) {
    if (at != nullptr && at->begin.line > 0) {
      errors_.push_back(fmt::format("{}: {}: {} (line {})", file_, path, problem, at->begin.line));
    } else {
      errors_.push_back(fmt::format("{}: {}: {}", file_, path, problem));
    }
  }
  void error(std::string_view path, std::string_view problem, const toml::node& at) {
    error(path, problem, &at.source());
  }
  void error(std::string_view path, std::string_view problem) { error(path, problem, nullptr); }

  // --- generic readers -------------------------------------------------------------------

  void check_keys(const toml::table& t, std::string_view prefix,
                  std::vector<std::string_view> allowed, bool with_request_keys = false) {
    if (with_request_keys)
      allowed.insert(allowed.end(), std::begin(request_keys), std::end(request_keys));
    for (auto&& [k, v] : t) {
      if (std::find(allowed.begin(), allowed.end(), k.str()) == allowed.end()) {
        error(join_path(prefix, k.str()), "unknown key", &k.source());
      }
    }
  }

  const toml::table* table_at(const toml::table& parent, std::string_view key,
                              std::string_view prefix) {
    const toml::node* n = parent.get(key);
    if (n == nullptr) return nullptr;
    if (const auto* t = n->as_table()) return t;
    error(join_path(prefix, key), fmt::format("expected a table, got {}", type_name(n->type())),
          *n);
    return nullptr;
  }

  // Returns the string when present and a string; reports a wrong type.
  std::optional<std::string> read_string(const toml::table& t, std::string_view key,
                                         std::string_view prefix) {
    const toml::node* n = t.get(key);
    if (n == nullptr) return std::nullopt;
    if (const auto* s = n->as_string()) return s->get();
    error(join_path(prefix, key), fmt::format("expected a string, got {}", type_name(n->type())),
          *n);
    return std::nullopt;
  }

  std::optional<bool> read_bool(const toml::table& t, std::string_view key,
                                std::string_view prefix) {
    const toml::node* n = t.get(key);
    if (n == nullptr) return std::nullopt;
    if (const auto* b = n->as_boolean()) return b->get();
    error(join_path(prefix, key), fmt::format("expected a boolean, got {}", type_name(n->type())),
          *n);
    return std::nullopt;
  }

  // Integers within [min, max]; the bounds are the caller's documented judgement.
  std::optional<std::int64_t> read_int(const toml::table& t, std::string_view key,
                                       std::string_view prefix, std::int64_t min,
                                       std::int64_t max) {
    const toml::node* n = t.get(key);
    if (n == nullptr) return std::nullopt;
    const auto* i = n->as_integer();
    if (i == nullptr) {
      error(join_path(prefix, key),
            fmt::format("expected an integer, got {}", type_name(n->type())), *n);
      return std::nullopt;
    }
    const std::int64_t v = i->get();
    if (v < min || v > max) {
      std::string problem;
      if (v < 0 && min >= 0) {
        problem = fmt::format("must not be negative, got {}", v);
      } else if (max == i64_max) {
        problem = fmt::format("must be at least {}, got {}", min, v);
      } else {
        problem = fmt::format("must be between {} and {}, got {}", min, max, v);
      }
      error(join_path(prefix, key), problem, *n);
      return std::nullopt;
    }
    return v;
  }

  template <class T>
  void read_into(const toml::table& t, std::string_view key, std::string_view prefix, T& out,
                 std::int64_t min, std::int64_t max) {
    if (auto v = read_int(t, key, prefix, min, max)) out = static_cast<T>(*v);
  }

  void read_ms(const toml::table& t, std::string_view key, std::string_view prefix, millis& out,
               std::int64_t min) {
    if (auto v = read_int(t, key, prefix, min, max_duration_ms)) out = millis(*v);
  }

  std::optional<std::vector<std::string>> read_string_list(const toml::table& t,
                                                           std::string_view key,
                                                           std::string_view prefix) {
    const toml::node* n = t.get(key);
    if (n == nullptr) return std::nullopt;
    const auto path = join_path(prefix, key);
    const auto* a = n->as_array();
    if (a == nullptr) {
      error(path, fmt::format("expected an array of strings, got {}", type_name(n->type())), *n);
      return std::nullopt;
    }
    std::vector<std::string> out;
    bool ok = true;
    for (std::size_t i = 0; i < a->size(); ++i) {
      const toml::node& e = *a->get(i);
      if (const auto* s = e.as_string()) {
        out.push_back(s->get());
      } else {
        error(fmt::format("{}[{}]", path, i),
              fmt::format("expected a string, got {}", type_name(e.type())), e);
        ok = false;
      }
    }
    if (!ok) return std::nullopt;
    return out;
  }

  // `[[name]]`: an array whose elements are tables. Returns the tables with their indices.
  std::vector<std::pair<std::size_t, const toml::table*>> array_of_tables(const toml::table& root,
                                                                          std::string_view key) {
    std::vector<std::pair<std::size_t, const toml::table*>> out;
    const toml::node* n = root.get(key);
    if (n == nullptr) return out;
    const auto* a = n->as_array();
    if (a == nullptr) {
      error(key,
            fmt::format("expected an array of tables ([[{}]]), got {}", key, type_name(n->type())),
            *n);
      return out;
    }
    for (std::size_t i = 0; i < a->size(); ++i) {
      const toml::node& e = *a->get(i);
      if (const auto* t = e.as_table()) {
        out.emplace_back(i, t);
      } else {
        error(fmt::format("{}[{}]", key, i),
              fmt::format("expected a table, got {}", type_name(e.type())), e);
      }
    }
    return out;
  }

  // "host:port" or "[v6]:port". `min_port` is 0 only for server.listen (0 = an ephemeral port,
  // which tests use); a port others must connect to has to be a real one.
  std::optional<host_port> parse_host_port(std::string_view s, std::string_view path,
                                           const toml::node* at, int min_port) {
    const auto fail = [&](std::string_view why) {
      error(path, fmt::format("expected \"host:port\", got \"{}\": {}", s, why),
            at != nullptr ? &at->source() : nullptr);
      return std::nullopt;
    };
    host_port hp;
    std::string_view port;
    if (!s.empty() && s.front() == '[') {
      const auto close = s.find(']');
      if (close == std::string_view::npos) return fail("unclosed '['");
      hp.host = std::string(s.substr(1, close - 1));
      if (close + 1 >= s.size() || s[close + 1] != ':') return fail("missing port");
      port = s.substr(close + 2);
    } else {
      const auto colon = s.rfind(':');
      if (colon == std::string_view::npos) return fail("missing port");
      hp.host = std::string(s.substr(0, colon));
      if (hp.host.find(':') != std::string::npos) return fail("write an IPv6 host as [addr]");
      port = s.substr(colon + 1);
    }
    if (hp.host.empty()) return fail("missing host");
    if (port.empty() || port.size() > 5 ||
        !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return fail("the port must be a number");
    }
    const int p = std::atoi(std::string(port).c_str());
    if (p < min_port || p > 65535) {
      return fail(fmt::format("the port must be between {} and 65535", min_port));
    }
    hp.port = static_cast<std::uint16_t>(p);
    return hp;
  }

  // --- sections ----------------------------------------------------------------------------

  void read_server(const toml::table& t) {
    const std::string_view p = "server";
    check_keys(t, p,
               {"listen", "max_request_bytes", "max_header_bytes", "max_header_fields",
                "max_json_depth", "max_connections", "header_timeout_ms", "keepalive_timeout_ms",
                "drain_timeout_ms", "sched_batch", "malloc_tcache_count", "threads"});
    auto& s = cfg_.server;
    if (auto listen = read_string(t, "listen", p)) {
      if (auto hp = parse_host_port(*listen, "server.listen", t.get("listen"), 0)) {
        s.listen_host = hp->host;
        s.listen_port = hp->port;
      }
    }
    // Sizes and counts of zero would refuse every request or connection: at least 1.
    read_into(t, "max_request_bytes", p, s.max_request_bytes, 1, i64_max);
    read_into(t, "max_header_bytes", p, s.max_header_bytes, 1, i64_max);
    read_into(t, "max_header_fields", p, s.max_header_fields, 1, u32_max);
    read_into(t, "max_json_depth", p, s.max_json_depth, 1, u32_max);
    read_into(t, "max_connections", p, s.max_connections, 1, u32_max);
    // A zero header timeout would time out every request before its first byte.
    read_ms(t, "header_timeout_ms", p, s.header_timeout, 1);
    // 0 = no keep-alive (close after each response); 0 drain = cancel in-flight at once.
    read_ms(t, "keepalive_timeout_ms", p, s.keepalive_timeout, 0);
    read_ms(t, "drain_timeout_ms", p, s.drain_timeout, 0);
    if (auto b = read_bool(t, "sched_batch", p)) s.sched_batch = *b;
    // glibc refuses a tcache_count above 65535 (and keeps its default).
    read_into(t, "malloc_tcache_count", p, s.malloc_tcache_count, 0, 65535);
    // 0 = one per usable CPU. More than 1024 io threads is a typo, not a machine.
    read_into(t, "threads", p, s.threads, 0, 1024);
  }

  // Reads whichever [request] keys `t` has; shared by [request] and the model overrides.
  request_overrides read_request_keys(const toml::table& t, std::string_view p) {
    request_overrides o;
    const auto ms = [&](std::string_view key, std::optional<millis>& out, std::int64_t min) {
      if (auto v = read_int(t, key, p, min, max_duration_ms)) out = millis(*v);
    };
    // deadline 0 = off (contract). The attempt and idle timeouts have no "off" in the contract;
    // a zero would fail every attempt / every stream, so it is refused rather than guessed at.
    ms("deadline_ms", o.deadline, 0);
    ms("attempt_timeout_ms", o.attempt_timeout, 1);
    ms("stream_idle_timeout_ms", o.stream_idle_timeout, 1);
    // More than 100 retries of one model is a misconfiguration, not a policy.
    if (auto v = read_int(t, "max_retries", p, 0, 100))
      o.max_retries = static_cast<std::uint32_t>(*v);
    ms("retry_backoff_ms", o.retry_backoff, 0);
    if (auto v = read_int(t, "max_response_bytes", p, 1, i64_max)) {
      o.max_response_bytes = static_cast<std::uint64_t>(*v);
    }
    return o;
  }

  static void apply(const request_overrides& o, request_config& r) {
    if (o.deadline) r.deadline = *o.deadline;
    if (o.attempt_timeout) r.attempt_timeout = *o.attempt_timeout;
    if (o.stream_idle_timeout) r.stream_idle_timeout = *o.stream_idle_timeout;
    if (o.max_retries) r.max_retries = *o.max_retries;
    if (o.retry_backoff) r.retry_backoff = *o.retry_backoff;
    if (o.max_response_bytes) r.max_response_bytes = *o.max_response_bytes;
  }

  void read_request(const toml::table& t) {
    check_keys(t, "request",
               {"min_retry_concurrency", "retry_budget_percent", "response_affinity_max"}, true);
    apply(read_request_keys(t, "request"), cfg_.request);
    // 0 and 0 admit no retry at all, a policy an operator may want; above 100 % a retry budget
    // would admit more retries than requests, which is no budget.
    read_into(t, "min_retry_concurrency", "request", cfg_.request.min_retry_concurrency, 0,
              u32_max);
    read_into(t, "retry_budget_percent", "request", cfg_.request.retry_budget_percent, 0, 100);
    // Each entry is an id and an index: ten million is a few hundred MiB, past any real need.
    read_into(t, "response_affinity_max", "request", cfg_.request.response_affinity_max, 0,
              10000000);
  }

  void read_budget(const toml::table& t) {
    const std::string_view p = "budget";
    check_keys(t, p, {"max_in_flight", "queue_max", "queue_timeout_ms"});
    auto& b = cfg_.budget;
    read_into(t, "max_in_flight", p, b.max_in_flight, 1, u32_max);  // 0 would admit nothing
    read_into(t, "queue_max", p, b.queue_max, 0, u32_max);          // 0 = no queueing
    read_ms(t, "queue_timeout_ms", p, b.queue_timeout, 0);          // 0 = until the deadline
  }

  static bool valid_env_name(std::string_view s) {
    if (s.empty() || std::isdigit(static_cast<unsigned char>(s.front()))) return false;
    return std::all_of(s.begin(), s.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
    });
  }

  // base_url: scheme, host, port, optional path prefix; the gateway appends the incoming
  // /v1/... path, hence no /v1 here. IPv6 hosts are stored without brackets (resolvable form).
  std::optional<upstream_url> parse_base_url(const std::string& s, std::string_view path,
                                             const toml::node* at) {
    const auto* where = at != nullptr ? &at->source() : nullptr;
    auto r = boost::urls::parse_uri(s);
    if (!r) {
      error(path, fmt::format("\"{}\" is not a valid URL: {}", s, r.error().message()), where);
      return std::nullopt;
    }
    const auto& u = *r;
    upstream_url out;
    bool ok = true;
    const auto bad = [&](std::string_view why) {
      error(path, fmt::format("\"{}\": {}", s, why), where);
      ok = false;
    };
    if (u.scheme_id() == boost::urls::scheme::https) {
      out.tls = true;
      out.port = 443;
    } else if (u.scheme_id() == boost::urls::scheme::http) {
      out.port = 80;
    } else {
      bad(fmt::format("scheme must be http or https, got \"{}\"", std::string_view(u.scheme())));
    }
    if (!u.has_authority() || u.encoded_host().empty()) bad("a host is required");
    if (u.has_userinfo()) bad("credentials in the URL are not allowed (use api_key_env)");
    if (u.has_query()) bad("a query is not allowed");
    if (u.has_fragment()) bad("a fragment is not allowed");
    if (u.has_port()) {
      const std::string_view port = u.port();
      const long p = port.empty() || port.size() > 5 ? 0 : std::atol(std::string(port).c_str());
      if (p < 1 || p > 65535) {
        bad("the port must be between 1 and 65535");
      } else {
        out.port = static_cast<std::uint16_t>(p);
      }
    }
    out.host = u.host_type() == boost::urls::host_type::ipv6 ? std::string(u.host_address())
                                                             : std::string(u.host());
    // A name the resolver and the Host header can take as is: no percent-decoded oddities.
    const bool plain_host = std::all_of(out.host.begin(), out.host.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
             c == ':';
    });
    if (!plain_host) bad("the host may hold only letters, digits, '.', '-' and '_'");
    std::string prefix(u.encoded_path());
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    if (prefix.ends_with("/v1")) {
      bad("must not end in /v1: base_url is the server root (plus an optional prefix); the "
          "gateway appends the request's /v1/... path");
    }
    out.path_prefix = prefix;
    if (!ok) return std::nullopt;
    return out;
  }

  void read_upstreams(const toml::table& root) {
    const auto tables = array_of_tables(root, "upstreams");
    const toml::node* n = root.get("upstreams");
    if (tables.empty() && (n == nullptr || n->is_array())) {
      error("upstreams", "at least one [[upstreams]] entry is required");
    }
    if (tables.size() > max_upstreams) {
      error("upstreams", fmt::format("at most {} [[upstreams]] entries", max_upstreams));
    }
    std::map<std::string, std::size_t> seen;
    for (const auto& [i, t] : tables) {
      const auto p = fmt::format("upstreams[{}]", i);
      check_keys(*t, p,
                 {"name",
                  "base_url",
                  "api_key_env",
                  "max_in_flight",
                  "connect_timeout_ms",
                  "idle_timeout_ms",
                  "weight",
                  "eject_after_failures",
                  "eject_base_ms",
                  "eject_max_ms",
                  "health_path",
                  "health_interval_ms",
                  "api",
                  "surfaces",
                  "max_tokens_in_flight",
                  "engine",
                  "upstream_stream",
                  "metrics_path",
                  "metrics_interval_ms",
                  "metrics_running_series",
                  "metrics_queued_series",
                  "release_grace_max_ms"});
      upstream_config u;
      if (auto name = read_string(*t, "name", p)) {
        u.name = *name;
        if (u.name.empty()) error(p + ".name", "must not be empty", *t->get("name"));
      } else if (t->get("name") == nullptr) {
        error(p + ".name", "missing required key", &t->source());
      }
      if (!u.name.empty()) {
        auto [it, fresh] = seen.emplace(u.name, i);
        if (!fresh) {
          error(p + ".name",
                fmt::format("duplicate upstream name \"{}\" (first at upstreams[{}])", u.name,
                            it->second),
                *t->get("name"));
        }
      }
      if (auto url = read_string(*t, "base_url", p)) {
        u.base_url = *url;
        if (auto parsed = parse_base_url(*url, p + ".base_url", t->get("base_url")))
          u.url = *parsed;
      } else if (t->get("base_url") == nullptr) {
        error(p + ".base_url", "missing required key", &t->source());
      }
      if (auto env = read_string(*t, "api_key_env", p)) {
        // "" = no key. Never echo the value on error: it may be a key pasted in by mistake.
        if (!env->empty() && !valid_env_name(*env)) {
          error(p + ".api_key_env",
                "is not a valid environment variable name (it names the variable that holds "
                "the key; the key itself never goes in the file)",
                *t->get("api_key_env"));
        } else if (!env->empty()) {
          u.api_key_env = *env;
          auto value = env_(*env);
          if (!value || value->empty()) {
            error(p + ".api_key_env",
                  fmt::format("environment variable {} is not set or empty", *env),
                  *t->get("api_key_env"));
          } else {
            u.api_key = std::move(*value);
          }
        }
      }
      read_api(*t, p, u);
      read_into(*t, "max_in_flight", p, u.max_in_flight, 1, u32_max);
      read_into(*t, "max_tokens_in_flight", p, u.max_tokens_in_flight, 0, max_token_count);
      read_ms(*t, "connect_timeout_ms", p, u.connect_timeout, 1);
      read_ms(*t, "idle_timeout_ms", p, u.idle_timeout, 1);
      read_health(*t, p, u);
      read_engine(*t, p, u);
      cfg_.upstreams.push_back(std::move(u));
    }
  }

  // `api` and `surfaces`: what the upstream's deployments serve. An OpenAI-API server may list
  // any surface (vLLM and llama.cpp serve /v1/messages too); an Anthropic one only its own.
  void read_api(const toml::table& t, const std::string& p, upstream_config& u) {
    if (auto api = read_string(t, "api", p)) {
      if (*api == "openai") {
        u.api = upstream_api::openai;
      } else if (*api == "anthropic") {
        u.api = upstream_api::anthropic;
      } else {
        error(p + ".api", fmt::format("expected \"openai\" or \"anthropic\", got \"{}\"", *api),
              *t.get("api"));
      }
    }
    u.surfaces = default_surfaces(u.api);
    const toml::node* at = t.get("surfaces");
    if (at == nullptr) return;
    auto names = read_string_list(t, "surfaces", p);
    if (!names) return;
    const auto where = p + ".surfaces";
    if (names->empty()) {
      error(where, "must list at least one surface (leave it out for the api's defaults)", *at);
      return;
    }
    surface_set set = 0;
    for (const auto& name : *names) {
      const auto s = surface_named(name);
      if (!s) {
        error(where,
              fmt::format("\"{}\" is not a surface (expected one of {})", name,
                          names_of(static_cast<surface_set>((1U << surface_count) - 1))),
              *at);
      } else if (!serves(default_surfaces(u.api), *s) && u.api == upstream_api::anthropic) {
        error(where,
              fmt::format("\"{}\" is not served by an api = \"anthropic\" upstream (it serves {})",
                          name, names_of(default_surfaces(u.api))),
              *at);
      } else if (serves(set, *s)) {
        error(where, fmt::format("\"{}\" is listed twice", name), *at);
      } else {
        set = static_cast<surface_set>(set | bit_of(*s));
      }
    }
    u.surfaces = set;
  }

  // The engine keys (docs/contract.md, "The work ends in the engine").
  void read_engine(const toml::table& t, const std::string& p, upstream_config& u) {
    if (auto engine = read_string(t, "engine", p)) {
      constexpr engine_kind all[] = {engine_kind::openai, engine_kind::llamacpp, engine_kind::vllm,
                                     engine_kind::sglang};
      const auto* found = std::find_if(std::begin(all), std::end(all),
                                       [&](engine_kind e) { return name_of(e) == *engine; });
      if (found == std::end(all)) {
        error(p + ".engine",
              fmt::format("expected \"openai\", \"llamacpp\", \"vllm\" or \"sglang\", got \"{}\"",
                          *engine),
              *t.get("engine"));
      } else {
        u.engine = *found;
      }
    }
    u.upstream_stream = default_upstream_stream(u.engine);
    if (auto mode = read_string(t, "upstream_stream", p)) {
      if (*mode == "always") {
        u.upstream_stream = upstream_stream_mode::always;
      } else if (*mode == "as_requested") {
        u.upstream_stream = upstream_stream_mode::as_requested;
      } else {
        error(p + ".upstream_stream",
              fmt::format("expected \"always\" or \"as_requested\", got \"{}\"", *mode),
              *t.get("upstream_stream"));
      }
    }
    if (auto path = read_request_path(t, "metrics_path", p, "not polled")) u.metrics_path = *path;
    // Polled more often than every 100 ms, the poll would be the engine's load, not its account.
    read_ms(t, "metrics_interval_ms", p, u.metrics_interval, 100);
    for (auto [key, out] : {std::pair{"metrics_running_series", &u.metrics_running_series},
                            std::pair{"metrics_queued_series", &u.metrics_queued_series}}) {
      auto name = read_string(t, key, p);
      if (!name) continue;
      // A Prometheus metric name (llama.cpp's have a colon): checked so a typo is an error here,
      // not a series that never matches.
      const bool valid =
          !name->empty() && std::isdigit(static_cast<unsigned char>(name->front())) == 0 &&
          std::all_of(name->begin(), name->end(), [](char c) {
            return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == ':';
          });
      if (!valid) {
        error(p + "." + key, "must be a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)",
              *t.get(key));
      } else {
        *out = *name;
      }
    }
    if (auto ms = read_int(t, "release_grace_max_ms", p, 0, 60000))
      u.release_grace_max = millis(*ms);
    // Polled, an "openai" engine's text would never be read: no series is known for it.
    if (!u.metrics_path.empty() && u.engine == engine_kind::openai &&
        u.metrics_running_series.empty()) {
      error(p + ".metrics_path",
            "engine \"openai\" names no series of running requests: set engine (\"llamacpp\", "
            "\"vllm\", \"sglang\") or metrics_running_series",
            *t.get("metrics_path"));
    }
  }

  // A path that goes into a request line as written: "" or "/..." of visible ASCII (percent-
  // encode the rest). The value is echoed only once it is known to print cleanly.
  std::optional<std::string> read_request_path(const toml::table& t, std::string_view key,
                                               const std::string& p, std::string_view empty_means) {
    auto path = read_string(t, key, p);
    if (!path) return std::nullopt;
    const toml::node& at = *t.get(key);
    const auto where = p + "." + std::string(key);
    constexpr std::size_t max_path = 1024;
    const bool clean = std::all_of(path->begin(), path->end(), [](char c) {
      const auto b = static_cast<unsigned char>(c);
      return b > 0x20 && b < 0x7f;
    });
    if (path->size() > max_path) {
      error(where, fmt::format("must be at most {} bytes, got {}", max_path, path->size()), at);
    } else if (!clean) {
      error(where,
            "must not contain spaces, control characters or non-ASCII bytes (percent-encode "
            "them)",
            at);
    } else if (!path->empty() && path->front() != '/') {
      error(where,
            fmt::format("expected \"\" ({}) or a path starting with \"/\", got \"{}\"", empty_means,
                        *path),
            at);
    } else {
      return path;
    }
    return std::nullopt;
  }

  // The health keys (docs/contract.md, "Upstream health and load-aware routing").
  void read_health(const toml::table& t, const std::string& p, upstream_config& u) {
    // A weight of 0 would be a deployment that never gets traffic (remove it instead); past
    // 1000 the ratio between two deployments is no longer a share anyone means.
    read_into(t, "weight", p, u.weight, 1, 1000);
    read_into(t, "eject_after_failures", p, u.eject_after_failures, 0, 1000);  // 0 = never
    // An ejection of 0 ms is no ejection; eject_after_failures = 0 is how to ask for none.
    const auto base = read_int(t, "eject_base_ms", p, 1, max_duration_ms);
    const auto max = read_int(t, "eject_max_ms", p, 1, max_duration_ms);
    if (base) u.eject_base = millis(*base);
    if (max) u.eject_max = millis(*max);
    // Compared only when neither was refused above (a refused one has its own error).
    const toml::node* max_at = t.get("eject_max_ms");
    const toml::node* base_at = t.get("eject_base_ms");
    if ((max || max_at == nullptr) && (base || base_at == nullptr) && u.eject_max < u.eject_base) {
      const toml::node* at = max_at != nullptr ? max_at : base_at;
      error(p + ".eject_max_ms",
            fmt::format("{}{} is below eject_base_ms ({}): an ejection doubles from "
                        "eject_base_ms up to eject_max_ms",
                        max_at != nullptr ? "" : "the default ", u.eject_max.count(),
                        u.eject_base.count()),
            at != nullptr ? &at->source() : &t.source());
    }
    if (auto path = read_request_path(t, "health_path", p, "no active check"))
      u.health_path = *path;
    // Checks more often than every 100 ms would be load on the upstream, not a health signal.
    read_ms(t, "health_interval_ms", p, u.health_interval, 100);
  }

  static bool same(const request_overrides& a, const request_overrides& b) {
    return a.deadline == b.deadline && a.attempt_timeout == b.attempt_timeout &&
           a.stream_idle_timeout == b.stream_idle_timeout && a.max_retries == b.max_retries &&
           a.retry_backoff == b.retry_backoff && a.max_response_bytes == b.max_response_bytes;
  }

  struct model_entry {
    std::size_t index;  // position in [[models]]
    const toml::table* table;
    bool fallbacks_ok = true;  // the fallbacks key parsed (wrong types already reported)
  };

  void read_models(const toml::table& root) {
    const auto tables = array_of_tables(root, "models");
    const toml::node* n = root.get("models");
    if (tables.empty() && (n == nullptr || n->is_array())) {
      error("models", "at least one [[models]] entry is required");
    }
    std::vector<model_entry> entries;
    for (const auto& [i, t] : tables) {
      const auto p = fmt::format("models[{}]", i);
      check_keys(*t, p, {"name", "upstream", "upstream_model", "fallbacks", "default_max_tokens"},
                 true);
      model_config m;
      if (auto name = read_string(*t, "name", p)) {
        m.name = *name;
        // "*" means "every model" in [[keys]]; a model of that name could not be granted alone.
        if (m.name.empty() || m.name == "*") {
          error(p + ".name", m.name.empty() ? "must not be empty" : "\"*\" is reserved",
                *t->get("name"));
        }
      } else if (t->get("name") == nullptr) {
        error(p + ".name", "missing required key", &t->source());
      }
      if (auto up = read_string(*t, "upstream", p)) {
        m.upstream = *up;
        const bool known = std::any_of(cfg_.upstreams.begin(), cfg_.upstreams.end(),
                                       [&](const upstream_config& u) { return u.name == *up; });
        if (!known) {
          error(p + ".upstream", fmt::format("\"{}\" is not a configured upstream", *up),
                *t->get("upstream"));
        }
      } else if (t->get("upstream") == nullptr) {
        error(p + ".upstream", "missing required key", &t->source());
      }
      if (auto um = read_string(*t, "upstream_model", p)) {
        if (um->empty())
          error(p + ".upstream_model", "must not be empty", *t->get("upstream_model"));
        m.upstream_model = *um;
      } else {
        m.upstream_model = m.name;
      }
      model_entry entry{i, t};
      if (t->get("fallbacks") != nullptr) {
        if (auto fb = read_string_list(*t, "fallbacks", p)) {
          m.fallbacks = std::move(*fb);
        } else {
          entry.fallbacks_ok = false;
        }
      }
      m.overrides = read_request_keys(*t, p);
      read_into(*t, "default_max_tokens", p, m.default_max_tokens, 0, u32_max);
      cfg_.models.push_back(std::move(m));
      entries.push_back(entry);
    }
    check_model_graph(entries);
  }

  // Deployments agree, fallbacks name real models, and the fallback graph has no cycle
  // (a cycle would make a failing request bounce between models until its deadline).
  void check_model_graph(const std::vector<model_entry>& entries) {
    const auto& models = cfg_.models;
    std::map<std::string, std::size_t> first;  // name → position in models/entries
    for (std::size_t k = 0; k < models.size(); ++k) {
      const auto& m = models[k];
      if (m.name.empty()) continue;
      auto [it, fresh] = first.emplace(m.name, k);
      if (fresh) continue;
      const auto& f = models[it->second];
      const auto p = fmt::format("models[{}]", entries[k].index);
      if (entries[k].fallbacks_ok && entries[it->second].fallbacks_ok &&
          m.fallbacks != f.fallbacks) {
        error(p + ".fallbacks",
              fmt::format("deployments of \"{}\" disagree on fallbacks (see models[{}]); "
                          "give every deployment the same list",
                          m.name, entries[it->second].index),
              &entries[k].table->source());
      }
      if (!same(m.overrides, f.overrides)) {
        error(p,
              fmt::format("deployments of \"{}\" disagree on request overrides (see "
                          "models[{}]); give every deployment the same values",
                          m.name, entries[it->second].index),
              &entries[k].table->source());
      }
    }

    // Validate each name's fallbacks once (on its first deployment) and build the graph.
    std::map<std::string, std::vector<std::string>> edges;
    for (const auto& [name, k] : first) {
      const auto& m = models[k];
      const auto p = fmt::format("models[{}].fallbacks", entries[k].index);
      const toml::node* at = entries[k].table->get("fallbacks");
      std::set<std::string> listed;
      auto& out = edges[name];
      for (const auto& fb : m.fallbacks) {
        if (fb == name) {
          error(p, fmt::format("\"{}\" names the model itself", fb), at ? &at->source() : nullptr);
        } else if (!first.contains(fb)) {
          error(p, fmt::format("\"{}\" is not a configured model", fb),
                at ? &at->source() : nullptr);
        } else if (!listed.insert(fb).second) {
          error(p, fmt::format("\"{}\" is listed twice", fb), at ? &at->source() : nullptr);
        } else {
          out.push_back(fb);
        }
      }
    }

    // A fallback serves every surface its model does: a request falls back on the surface it
    // came in on, and a model that cannot answer there would turn a failure into a 404.
    std::map<std::string, surface_set> serves_of;
    for (const auto& m : models) {
      if (const auto* up = cfg_.find_upstream(m.upstream))
        serves_of[m.name] = static_cast<surface_set>(serves_of[m.name] | up->surfaces);
    }
    for (const auto& [name, k] : first) {
      const toml::node* at = entries[k].table->get("fallbacks");
      for (const auto& fb : edges[name]) {
        const auto missing = static_cast<surface_set>(serves_of[name] & ~serves_of[fb]);
        if (missing == 0) continue;
        error(fmt::format("models[{}].fallbacks", entries[k].index),
              fmt::format("\"{}\" does not serve {} (which \"{}\" serves): a fallback chain stays "
                          "on the request's surface",
                          fb, names_of(missing), name),
              at ? &at->source() : nullptr);
      }
    }

    // Depth-first search in configuration order; each back edge closes one cycle.
    enum class mark { white, grey, black };
    std::map<std::string, mark> marks;
    std::vector<std::string> stack;
    std::function<void(const std::string&)> visit = [&](const std::string& n) {
      marks[n] = mark::grey;
      stack.push_back(n);
      for (const auto& next : edges[n]) {
        if (marks[next] == mark::grey) {
          const auto from = std::find(stack.begin(), stack.end(), next);
          std::string cycle;
          for (auto it = from; it != stack.end(); ++it) cycle += *it + " -> ";
          cycle += next;
          const std::size_t k = first[next];
          const toml::node* at = entries[k].table->get("fallbacks");
          error(fmt::format("models[{}].fallbacks", entries[k].index),
                fmt::format("fallback cycle: {}", cycle), at ? &at->source() : nullptr);
        } else if (marks[next] == mark::white) {
          visit(next);
        }
      }
      stack.pop_back();
      marks[n] = mark::black;
    };
    for (const auto& m : models) {
      if (!m.name.empty() && marks[m.name] == mark::white) visit(m.name);
    }
  }

  void read_keys(const toml::table& root) {
    std::map<std::string, std::size_t> names;
    std::map<std::string, std::size_t> digests;
    for (const auto& [i, t] : array_of_tables(root, "keys")) {
      const auto p = fmt::format("keys[{}]", i);
      check_keys(
          *t, p,
          {"name", "sha256", "models", "max_in_flight", "rpm", "tpm", "weight", "max_priority"});
      key_config k;
      if (auto name = read_string(*t, "name", p)) {
        k.name = *name;
        if (k.name.empty()) {
          error(p + ".name", "must not be empty", *t->get("name"));
        } else if (auto [it, fresh] = names.emplace(k.name, i); !fresh) {
          error(p + ".name",
                fmt::format("duplicate key name \"{}\" (first at keys[{}])", k.name, it->second),
                *t->get("name"));
        }
      } else if (t->get("name") == nullptr) {
        error(p + ".name", "missing required key", &t->source());
      }
      if (auto digest = read_string(*t, "sha256", p)) {
        // The digest is not echoed: it identifies a token.
        const bool hex =
            digest->size() == 64 && std::all_of(digest->begin(), digest->end(), [](char c) {
              return std::isxdigit(static_cast<unsigned char>(c)) != 0;
            });
        if (!hex) {
          error(p + ".sha256",
                fmt::format("expected the 64 hex digits of a SHA-256 digest, got {} characters",
                            digest->size()),
                *t->get("sha256"));
        } else {
          std::transform(digest->begin(), digest->end(), digest->begin(),
                         [](char c) { return static_cast<char>(std::tolower(c)); });
          k.sha256_hex = *digest;
          if (auto [it, fresh] = digests.emplace(k.sha256_hex, i); !fresh) {
            error(p + ".sha256",
                  fmt::format("same digest as keys[{}]: one token cannot be two keys", it->second),
                  *t->get("sha256"));
          }
        }
      } else if (t->get("sha256") == nullptr) {
        error(p + ".sha256", "missing required key", &t->source());
      }
      // Required rather than defaulted: what a key may use is an access decision, so it is
      // written down (["*"] for every model).
      if (auto models = read_string_list(*t, "models", p)) {
        for (const auto& m : *models) {
          const bool known =
              m == "*" || std::any_of(cfg_.models.begin(), cfg_.models.end(),
                                      [&](const model_config& c) { return c.name == m; });
          if (!known) {
            error(p + ".models", fmt::format("\"{}\" is not a configured model", m),
                  *t->get("models"));
          }
        }
        k.models = std::move(*models);
      } else if (t->get("models") == nullptr) {
        error(p + ".models", "missing required key (use [\"*\"] for every model)", &t->source());
      }
      read_into(*t, "max_in_flight", p, k.max_in_flight, 0, u32_max);  // 0 = no per-key cap
      read_into(*t, "rpm", p, k.rpm, 0, max_token_count);              // 0 = unlimited
      read_into(*t, "tpm", p, k.tpm, 0, max_token_count);
      // A share of 0 would never be served; the bound keeps one key's turn from dwarfing the
      // others' beyond what a ratio can mean.
      read_into(*t, "weight", p, k.weight, 1, max_key_weight);
      if (auto name = read_string(*t, "max_priority", p)) {
        // Exact spelling in a config file, unlike the header.
        if (auto v = priority_named(*name); v && name_of(*v) == *name) {
          k.max_priority = *v;
        } else {
          error(p + ".max_priority",
                fmt::format("expected \"high\", \"normal\" or \"low\", got \"{}\"", *name),
                *t->get("max_priority"));
        }
      }
      cfg_.keys.push_back(std::move(k));
    }
  }

  void read_telemetry(const toml::table& t) {
    const std::string_view p = "telemetry";
    check_keys(t, p, {"log_format", "log_level", "otlp_endpoint", "service_name"});
    auto& tel = cfg_.telemetry;
    if (auto v = read_string(t, "log_format", p)) {
      if (*v != "json" && *v != "text") {
        error("telemetry.log_format", fmt::format("expected \"json\" or \"text\", got \"{}\"", *v),
              *t.get("log_format"));
      } else {
        tel.log_format = *v;
      }
    }
    if (auto v = read_string(t, "log_level", p)) {
      static constexpr std::string_view levels[] = {"trace", "debug",    "info", "warn",
                                                    "error", "critical", "off"};
      if (std::find(std::begin(levels), std::end(levels), *v) == std::end(levels)) {
        error("telemetry.log_level",
              fmt::format("expected one of trace, debug, info, warn, error, critical, off; "
                          "got \"{}\"",
                          *v),
              *t.get("log_level"));
      } else {
        tel.log_level = *v;
      }
    }
    if (auto v = read_string(t, "otlp_endpoint", p)) {
      if (!v->empty()) {
        auto r = boost::urls::parse_uri(*v);
        const bool ok = r &&
                        (r->scheme_id() == boost::urls::scheme::http ||
                         r->scheme_id() == boost::urls::scheme::https) &&
                        r->has_authority() && !r->encoded_host().empty();
        if (!ok) {
          error("telemetry.otlp_endpoint",
                fmt::format("expected an http:// or https:// URL, got \"{}\"", *v),
                *t.get("otlp_endpoint"));
        }
      }
      tel.otlp_endpoint = *v;
    }
    if (auto v = read_string(t, "service_name", p)) {
      if (v->empty()) {
        error("telemetry.service_name", "must not be empty", *t.get("service_name"));
      } else {
        tel.service_name = *v;
      }
    }
  }

  void read_cluster(const toml::table& t) {
    const std::string_view p = "cluster";
    check_keys(t, p, {"budget_listen", "budget_host", "lease_idle_ms"});
    auto& c = cfg_.cluster;
    for (auto [key, out] :
         {std::pair{"budget_listen", &c.budget_listen}, std::pair{"budget_host", &c.budget_host}}) {
      if (auto v = read_string(t, key, p)) {
        if (!v->empty()) parse_host_port(*v, join_path(p, key), t.get(key), 1);
        *out = *v;
      }
    }
    read_ms(t, "lease_idle_ms", p, c.lease_idle, 0);
    if (!c.budget_listen.empty() && !c.budget_host.empty()) {
      error("cluster",
            "budget_listen and budget_host are both set: a node either hosts the shared budget "
            "or uses another node's, not both",
            &t.source());
    }
  }

  // PROXY_REQUEST_DEADLINE / PROXY_REQUEST_TIMEOUT: seconds, integer or decimal. An empty
  // variable counts as unset, as shells and compose files commonly leave them.
  void apply_env_overrides() {
    const auto read = [&](const char* var, millis& out, std::int64_t min_ms) {
      auto raw = env_(var);
      if (!raw) return;
      std::string_view s = *raw;
      while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
      while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
      if (s.empty()) return;
      auto ms = parse_seconds(s);
      if (!ms) {
        error(var, fmt::format("environment variable: expected seconds as a non-negative "
                               "number such as 30 or 1.5, got \"{}\"",
                               s));
      } else if (*ms < min_ms || *ms > max_duration_ms) {
        error(var, fmt::format("environment variable: {} s is out of range ({} ms to {} ms)", s,
                               min_ms, max_duration_ms));
      } else {
        out = millis(*ms);
      }
    };
    read("PROXY_REQUEST_DEADLINE", cfg_.request.deadline, 0);
    read("PROXY_REQUEST_TIMEOUT", cfg_.request.attempt_timeout, 1);
  }

  // "12", "1.5", "0.25" → milliseconds (digits past the millisecond are dropped). No sign,
  // no exponent: a value written differently is more likely a mistake than a wish.
  static std::optional<std::int64_t> parse_seconds(std::string_view s) {
    const auto dot = s.find('.');
    const std::string_view whole = s.substr(0, dot);
    const std::string_view frac = dot == std::string_view::npos ? "" : s.substr(dot + 1);
    const auto digits = [](std::string_view d) {
      return std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (whole.empty() || !digits(whole) || !digits(frac)) return std::nullopt;
    if (dot != std::string_view::npos && frac.empty()) return std::nullopt;
    std::int64_t seconds = 0;
    for (char c : whole) {
      seconds = seconds * 10 + (c - '0');
      if (seconds > max_duration_ms) return max_duration_ms + 1;  // out of range, not garbage
    }
    std::int64_t ms = 0;
    for (std::size_t i = 0; i < 3; ++i) ms = ms * 10 + (i < frac.size() ? frac[i] - '0' : 0);
    return seconds * 1000 + ms;
  }

  std::string file_;
  const env_lookup& env_;
  gateway_config cfg_;
  std::vector<std::string> errors_;
};

}  // namespace

env_lookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    if (const char* v = std::getenv(name.c_str())) return std::string(v);
    return std::nullopt;
  };
}

load_result load_string(const std::string& toml_text, const std::string& source_name,
                        const env_lookup& env) {
  return loader(source_name, env).run(toml_text);
}

load_result load_file(const std::string& path, const env_lookup& env) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    load_result r;
    r.errors.push_back(fmt::format("{}: cannot read the file: {}", path, std::strerror(err)));
    return r;
  }
  std::ostringstream text;
  text << in.rdbuf();
  return load_string(text.str(), path, env);
}

}  // namespace tether::config
