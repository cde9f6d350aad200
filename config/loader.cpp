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

#include "config/settings.hpp"
#include "config/toml_guard.hpp"

namespace tether::config {
namespace {

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
    check_keys(root, "",
               {"server", "request", "budget", "upstreams", "models", "keys", "telemetry",
                "cluster", "ledger"});
    if (auto* t = table_at(root, "server", "")) read_server(*t);
    if (auto* t = table_at(root, "request", "")) read_request(*t);
    if (auto* t = table_at(root, "budget", "")) read_budget(*t);
    // Before [[keys]]: a key's budgets are checked against it.
    if (auto* t = table_at(root, "ledger", "")) read_ledger(*t);
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
                  const std::vector<std::string_view>& allowed) {
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

  // The keys a section's table may hold: its declared settings (and, in a [[models]] entry, the
  // [request] settings a model may override).
  void check_declared_keys(const toml::table& t, std::string_view prefix, section where) {
    std::vector<std::string_view> allowed;
    for (const auto& s : settings_of(where)) allowed.push_back(s.key);
    if (where == section::models) {
      for (const auto& s : settings_of(section::request))
        if (s.model_override) allowed.push_back(s.key);
    }
    check_keys(t, prefix, allowed);
  }

  // Reads one declared setting into `owner` (its section's struct) when `t` holds it and its
  // type is read here; text, lists and custom settings are read by the sections' own code.
  // Returns whether a value was taken; a refused one is reported and remembered in refused_.
  bool read_setting(const toml::table& t, std::string_view prefix, const setting& s, void* owner) {
    const toml::node* n = t.get(s.key);
    if (n == nullptr) return false;
    bool taken = false;
    switch (s.type) {
      case setting_type::integer:
      case setting_type::duration:
        if (auto v = read_int(t, s.key, prefix, s.min, s.max)) {
          s.ops->set_int(owner, *v);
          taken = true;
        }
        break;
      case setting_type::number:
        if (auto v = read_number(t, prefix, s)) {
          s.ops->set_number(owner, *v);
          taken = true;
        }
        break;
      case setting_type::boolean:
        if (auto v = read_bool(t, s.key, prefix)) {
          s.ops->set_int(owner, *v ? 1 : 0);
          taken = true;
        }
        break;
      case setting_type::choice:
        if (auto v = read_string(t, s.key, prefix)) {
          const bool listed = std::find(s.choices.begin(), s.choices.end(), *v) != s.choices.end();
          if (listed && s.ops->set_choice(owner, *v)) {
            taken = true;
          } else {
            error(join_path(prefix, s.key), fmt::format("{} \"{}\"", expected(s), *v), *n);
          }
        }
        break;
      case setting_type::text:
      case setting_type::list:
      case setting_type::custom:
        return false;
    }
    if (!taken) refused_.push_back(s.key);
    return taken;
  }

  // `expected "a", "b" or "c", got` (a long list: `expected one of a, b, c; got`).
  static std::string expected(const setting& s) {
    const bool few = s.choices.size() <= 4;
    std::string out = few ? "expected " : "expected one of ";
    for (std::size_t i = 0; i < s.choices.size(); ++i) {
      if (i > 0) out += few && i + 1 == s.choices.size() ? " or " : ", ";
      out += few ? fmt::format("\"{}\"", s.choices[i]) : std::string(s.choices[i]);
    }
    return out + (few ? ", got" : "; got");
  }

  // Every setting of `where` that the generic reader handles; refused_ lists the refused ones.
  void read_declared(const toml::table& t, std::string_view prefix, section where, void* owner) {
    refused_.clear();
    for (const auto& s : settings_of(where)) read_setting(t, prefix, s, owner);
  }

  bool refused(std::string_view key) const {
    return std::find(refused_.begin(), refused_.end(), key) != refused_.end();
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

  // A number within the declaration's bounds: a TOML float, or an integer (`price = 3` means
  // 3.0). inf and nan are out of every bound.
  std::optional<double> read_number(const toml::table& t, std::string_view prefix,
                                    const setting& s) {
    const toml::node* n = t.get(s.key);
    if (n == nullptr) return std::nullopt;
    std::optional<double> v;
    if (const auto* f = n->as_floating_point()) v = f->get();
    if (const auto* i = n->as_integer()) v = static_cast<double>(i->get());
    const auto where = join_path(prefix, s.key);
    if (!v) {
      error(where, fmt::format("expected a number, got {}", type_name(n->type())), *n);
      return std::nullopt;
    }
    const auto min = static_cast<double>(s.min);
    const auto max = static_cast<double>(s.max);
    const bool above = s.above_min ? *v > min : *v >= min;
    if (above && *v <= max) return *v == 0 ? 0.0 : *v;  // -0.0 is printed as 0
    std::string problem;
    if (s.above_min) {
      problem = fmt::format("must be above {} and at most {}, got {}", s.min, s.max, *v);
    } else if (*v < 0 && s.min >= 0) {
      problem = fmt::format("must not be negative, got {}", *v);
    } else if (s.max == i64_max) {
      problem = fmt::format("must be at least {}, got {}", s.min, *v);
    } else {
      problem = fmt::format("must be between {} and {}, got {}", s.min, s.max, *v);
    }
    error(where, problem, *n);
    return std::nullopt;
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
    check_declared_keys(t, p, section::server);
    auto& s = cfg_.server;
    if (auto listen = read_string(t, "listen", p)) {
      if (auto hp = parse_host_port(*listen, "server.listen", t.get("listen"), 0)) {
        s.listen_host = hp->host;
        s.listen_port = hp->port;
      }
    }
    read_declared(t, p, section::server, &s);
  }

  void read_request(const toml::table& t) {
    check_declared_keys(t, "request", section::request);
    read_declared(t, "request", section::request, &cfg_.request);
  }

  void read_budget(const toml::table& t) {
    check_declared_keys(t, "budget", section::budget);
    read_declared(t, "budget", section::budget, &cfg_.budget);
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
      check_declared_keys(*t, p, section::upstreams);
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
      read_declared(*t, p, section::upstreams, &u);
      read_surfaces(*t, p, u);
      read_health(*t, p, u);
      read_engine(*t, p, u);
      cfg_.upstreams.push_back(std::move(u));
    }
  }

  // `surfaces` (after `api`): what the upstream's deployments serve. An OpenAI-API server may list
  // any surface (vLLM and llama.cpp serve /v1/messages too); an Anthropic one only its own.
  void read_surfaces(const toml::table& t, const std::string& p, upstream_config& u) {
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
    // Not written: the engine's default (read above).
    if (t.get("upstream_stream") == nullptr) u.upstream_stream = default_upstream_stream(u.engine);
    if (auto path = read_request_path(t, "metrics_path", p, "not polled")) u.metrics_path = *path;
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
    // Compared only when neither was refused above (a refused one has its own error).
    const toml::node* max_at = t.get("eject_max_ms");
    const toml::node* base_at = t.get("eject_base_ms");
    if (!refused("eject_max_ms") && !refused("eject_base_ms") && u.eject_max < u.eject_base) {
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
      check_declared_keys(*t, p, section::models);
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
      read_declared(*t, p, section::models, &m);
      for (const auto& s : settings_of(section::request)) {
        if (s.model_override && read_setting(*t, p, s, &m.overrides.values))
          mark_written(m.overrides, s);
      }
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
      // One ring per model: its deployments route alike.
      if (m.routing != f.routing || m.prefix_bytes != f.prefix_bytes ||
          m.prefix_load_factor != f.prefix_load_factor) {
        error(p,
              fmt::format("deployments of \"{}\" disagree on routing, prefix_bytes or "
                          "prefix_load_factor (see models[{}]); give every deployment the same "
                          "values",
                          m.name, entries[it->second].index),
              &entries[k].table->source());
      }
      if (!(m.overrides == f.overrides)) {
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
      check_declared_keys(*t, p, section::keys);
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
      read_declared(*t, p, section::keys, &k);
      check_ledger_use(*t, p, k);
      cfg_.keys.push_back(std::move(k));
    }
  }

  // A key's budgets and admin need the ledger; a spend budget needs a price somewhere, since
  // with none every request's spend is 0 and the budget is never reached. Prices may differ
  // between deployments of one model: each is its upstream's (the ledger prices a request by
  // the deployment that served it).
  void check_ledger_use(const toml::table& t, const std::string& p, const key_config& k) {
    const bool priced = std::any_of(cfg_.models.begin(), cfg_.models.end(), [](const auto& m) {
      return m.price_input_per_mtok.value_or(0) > 0 || m.price_output_per_mtok.value_or(0) > 0 ||
             m.price_cached_input_per_mtok.value_or(0) > 0;
    });
    for (const auto& s : settings_of(section::keys)) {
      if (!s.needs_ledger || !in_use(s, &k)) continue;
      const toml::node& at = *t.get(s.key);
      if (!cfg_.ledger.enabled) {
        error(p + "." + std::string(s.key),
              fmt::format("{} needs the ledger: [ledger] enabled = false", s.key), at);
      } else if (s.type == setting_type::number && !priced) {
        error(p + "." + std::string(s.key),
              "no [[models]] entry has a price above 0, so every request's spend is 0 and this "
              "budget could never be reached (set price_input_per_mtok, price_output_per_mtok "
              "or price_cached_input_per_mtok)",
              at);
      }
    }
  }

  // [ledger]. The path is the SQLite file's; ledger_file() reads a relative one from the config
  // file's directory.
  void read_ledger(const toml::table& t) {
    const std::string_view p = "ledger";
    check_declared_keys(t, p, section::ledger);
    auto& l = cfg_.ledger;
    read_declared(t, p, section::ledger, &l);
    auto path = read_string(t, "path", p);
    if (!path) return;
    const toml::node& at = *t.get("path");
    const bool control = std::any_of(path->begin(), path->end(), [](char c) {
      return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
    });
    if (control) {
      error("ledger.path", "must not contain control characters", at);
    } else if (!path->empty() && (path->back() == '/' || path->ends_with("/.") ||
                                  path->ends_with("/..") || *path == "." || *path == "..")) {
      error("ledger.path",
            fmt::format("\"{}\" names a directory; name the database file (\"\" = "
                        "tether-ledger.db next to the config file)",
                        *path),
            at);
    } else {
      l.path = *path;
    }
  }

  void read_telemetry(const toml::table& t) {
    const std::string_view p = "telemetry";
    check_declared_keys(t, p, section::telemetry);
    auto& tel = cfg_.telemetry;
    read_declared(t, p, section::telemetry, &tel);
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
    check_declared_keys(t, p, section::cluster);
    auto& c = cfg_.cluster;
    for (auto [key, out] :
         {std::pair{"budget_listen", &c.budget_listen}, std::pair{"budget_host", &c.budget_host}}) {
      if (auto v = read_string(t, key, p)) {
        if (!v->empty()) parse_host_port(*v, join_path(p, key), t.get(key), 1);
        *out = *v;
      }
    }
    read_declared(t, p, section::cluster, &c);
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
  std::vector<std::string_view> refused_;  // keys read_declared refused, of the table last read
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
