// The declarations: one line per setting. Adding a setting is a member in config/config.hpp
// (its initializer is the default), one line here, and the code that uses it; the loader,
// `tether check`, the reload plan and the reference tables follow from the line.
#include "config/settings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <limits>
#include <type_traits>

#include "config/toml_text.hpp"

namespace tether::config {
namespace {

constexpr std::int64_t u32_max = std::numeric_limits<std::uint32_t>::max();
constexpr std::int64_t i64_max = std::numeric_limits<std::int64_t>::max();
// Token counts (caps, per-minute limits): far beyond any model server, far from overflowing a sum.
constexpr std::int64_t max_token_count = std::int64_t{1} << 48;
constexpr std::int64_t max_spend_usd = 1000000000;

// --- member pointers to field_ops ------------------------------------------------------------

template <class M>
struct member_traits;
template <class C, class T>
struct member_traits<T C::*> {
  using owner = C;
  using type = T;
};

template <class C>
constexpr section section_of();
template <>
constexpr section section_of<server_config>() {
  return section::server;
}
template <>
constexpr section section_of<request_config>() {
  return section::request;
}
template <>
constexpr section section_of<budget_config>() {
  return section::budget;
}
template <>
constexpr section section_of<upstream_config>() {
  return section::upstreams;
}
template <>
constexpr section section_of<model_config>() {
  return section::models;
}
template <>
constexpr section section_of<key_config>() {
  return section::keys;
}
template <>
constexpr section section_of<telemetry_config>() {
  return section::telemetry;
}
template <>
constexpr section section_of<cluster_config>() {
  return section::cluster;
}
template <>
constexpr section section_of<ledger_config>() {
  return section::ledger;
}

template <auto M>
struct member {
  using owner = typename member_traits<decltype(M)>::owner;
  using type = typename member_traits<decltype(M)>::type;
  static const type& of(const void* o) { return static_cast<const owner*>(o)->*M; }
  static type& of(void* o) { return static_cast<owner*>(o)->*M; }

  static constexpr bool numeric = std::is_arithmetic_v<type> || std::is_same_v<type, millis>;
  static constexpr bool optional_number = std::is_same_v<type, std::optional<double>>;
  static std::int64_t get_int(const void* o) {
    const auto& v = of(o);
    if constexpr (std::is_same_v<type, millis>) {
      return v.count();
    } else if constexpr (numeric) {
      return static_cast<std::int64_t>(v);
    } else {
      return 0;
    }
  }
  static void set_int(void* o, std::int64_t v) {
    if constexpr (std::is_same_v<type, millis>) {
      of(o) = millis(v);
    } else if constexpr (std::is_same_v<type, bool>) {
      of(o) = v != 0;
    } else if constexpr (numeric) {
      of(o) = static_cast<type>(v);
    }
  }
  static std::optional<double> get_number(const void* o) {
    if constexpr (std::is_same_v<type, double> || optional_number) {
      return of(o);
    } else {
      return std::nullopt;
    }
  }
  static void set_number(void* o, double v) {
    if constexpr (std::is_same_v<type, double> || optional_number) of(o) = v;
  }
  static std::string toml(const void* o) {
    const auto& v = of(o);
    if constexpr (std::is_same_v<type, double>) {
      return number_text(v);
    } else if constexpr (optional_number) {
      // Unset is no value at all (TOML has no null): `tether check` prints a comment instead.
      return v ? number_text(*v) : std::string();
    } else if constexpr (std::is_same_v<type, bool>) {
      return v ? "true" : "false";
    } else if constexpr (std::is_same_v<type, std::string>) {
      return quote(v);
    } else if constexpr (std::is_same_v<type, std::vector<std::string>>) {
      return quote_list(v);
    } else if constexpr (std::is_enum_v<type>) {
      return quote(name_of(v));
    } else {
      return std::to_string(get_int(o));
    }
  }
  static bool same(const void* a, const void* b) { return of(a) == of(b); }
  static void copy(void* to, const void* from) { of(to) = of(from); }

  // Enums by their name_of; strings as written.
  static bool set_choice(void* o, std::string_view name) {
    if constexpr (std::is_enum_v<type>) {
      for (int i = 0; i < 16; ++i) {
        const auto v = static_cast<type>(i);
        if (name_of(v) == name) {
          of(o) = v;
          return true;
        }
      }
      return false;
    } else if constexpr (std::is_same_v<type, std::string>) {
      of(o) = std::string(name);
      return true;
    } else {
      return false;
    }
  }

  static constexpr field_ops ops{get_int, set_int, get_number, set_number, set_choice,
                                 toml,    same,    copy,       nullptr};
};

// One builder per type; the section comes from the member's struct.
template <auto M>
constexpr setting declare(std::string_view key, setting_type type, std::string_view doc) {
  setting s{};
  s.where = section_of<typename member<M>::owner>();
  s.key = key;
  s.type = type;
  s.doc = doc;
  s.ops = &member<M>::ops;
  return s;
}

template <auto M>
constexpr setting integer(std::string_view key, std::string_view unit, std::int64_t min,
                          std::int64_t max, std::string_view doc) {
  auto s = declare<M>(key, setting_type::integer, doc);
  s.unit = unit;
  s.min = min;
  s.max = max;
  return s;
}
template <auto M>
constexpr setting duration(std::string_view key, std::int64_t min, std::string_view doc,
                           std::int64_t max = max_duration_ms) {
  auto s = declare<M>(key, setting_type::duration, doc);
  s.unit = "ms";
  s.min = min;
  s.max = max;
  return s;
}
// A double; `| above_min` refuses min itself.
template <auto M>
constexpr setting number(std::string_view key, std::string_view unit, std::int64_t min,
                         std::int64_t max, std::string_view doc) {
  auto s = declare<M>(key, setting_type::number, doc);
  s.unit = unit;
  s.min = min;
  s.max = max;
  return s;
}
template <auto M>
constexpr setting boolean(std::string_view key, std::string_view doc) {
  return declare<M>(key, setting_type::boolean, doc);
}
template <auto M>
constexpr setting choice(std::string_view key, std::span<const std::string_view> names,
                         std::string_view doc) {
  auto s = declare<M>(key, setting_type::choice, doc);
  s.choices = names;
  return s;
}
template <auto M>
constexpr setting text(std::string_view key, std::string_view range, std::string_view doc) {
  auto s = declare<M>(key, setting_type::text, doc);
  s.range_doc = range;
  return s;
}
template <auto M>
constexpr setting list(std::string_view key, std::string_view range, std::string_view doc) {
  auto s = declare<M>(key, setting_type::list, doc);
  s.range_doc = range;
  return s;
}
constexpr setting custom(section where, std::string_view key, std::string_view range,
                         const field_ops& ops, std::string_view doc) {
  setting s{};
  s.where = where;
  s.key = key;
  s.type = setting_type::custom;
  s.range_doc = range;
  s.doc = doc;
  s.ops = &ops;
  return s;
}

// Modifiers, written after a declaration: `integer<...>(...) | restart`.
struct modifier {
  void (*apply)(setting&);
};
constexpr setting operator|(setting s, modifier m) {
  m.apply(s);
  return s;
}
constexpr modifier restart{[](setting& s) { s.reload = on_reload::restart; }};
constexpr modifier new_connections{[](setting& s) { s.reload = on_reload::new_connections; }};
constexpr modifier model_override{[](setting& s) { s.model_override = true; }};
constexpr modifier required{[](setting& s) { s.required = true; }};
constexpr modifier above_min{[](setting& s) { s.above_min = true; }};
constexpr modifier needs_ledger{[](setting& s) { s.needs_ledger = true; }};
struct note {
  std::string_view text;
};
constexpr setting operator|(setting s, note n) {
  s.unset_note = n.text;
  return s;
}
struct default_is {
  std::string_view text;
};
constexpr setting operator|(setting s, default_is d) {
  s.default_doc = d.text;
  return s;
}
struct range_is {
  std::string_view text;
};
constexpr setting operator|(setting s, range_is r) {
  s.range_doc = r.text;
  return s;
}

// --- settings of several fields, by hand --------------------------------------------------------

// server.listen: host and port.
const field_ops listen_ops{
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    [](const void* o) {
      const auto& s = *static_cast<const server_config*>(o);
      return quote(host_port(s.listen_host, s.listen_port));
    },
    [](const void* a, const void* b) {
      const auto& x = *static_cast<const server_config*>(a);
      const auto& y = *static_cast<const server_config*>(b);
      return x.listen_host == y.listen_host && x.listen_port == y.listen_port;
    },
    [](void* to, const void* from) {
      auto& x = *static_cast<server_config*>(to);
      const auto& y = *static_cast<const server_config*>(from);
      x.listen_host = y.listen_host;
      x.listen_port = y.listen_port;
    },
    nullptr,
};

// upstreams.base_url: as written and parsed; its path prefix goes into the request line only.
const field_ops base_url_ops{
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    [](const void* o) {
      const auto& u = *static_cast<const upstream_config*>(o);
      return fmt::format("{}\n# resolved: {}://{}, path prefix {}", quote(u.base_url),
                         u.url.tls ? "https" : "http", host_port(u.url.host, u.url.port),
                         quote(u.url.path_prefix));
    },
    [](const void* a, const void* b) {
      const auto& x = *static_cast<const upstream_config*>(a);
      const auto& y = *static_cast<const upstream_config*>(b);
      return x.base_url == y.base_url && x.url.tls == y.url.tls && x.url.host == y.url.host &&
             x.url.port == y.url.port && x.url.path_prefix == y.url.path_prefix;
    },
    [](void* to, const void* from) {
      auto& x = *static_cast<upstream_config*>(to);
      const auto& y = *static_cast<const upstream_config*>(from);
      x.base_url = y.base_url;
      x.url = y.url;
    },
    [](const void* a, const void* b) {
      const auto& x = *static_cast<const upstream_config*>(a);
      const auto& y = *static_cast<const upstream_config*>(b);
      return x.url.tls == y.url.tls && x.url.host == y.url.host && x.url.port == y.url.port;
    },
};

// upstreams.api_key_env: the variable's name, and the key read from it (never printed).
const field_ops api_key_env_ops{
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    [](const void* o) {
      const auto& u = *static_cast<const upstream_config*>(o);
      if (u.api_key_env.empty()) return std::string("\"\"  # no key sent");
      return fmt::format("{}  # key: {}", quote(u.api_key_env),
                         u.api_key.empty() ? "missing" : "set");
    },
    [](const void* a, const void* b) {
      const auto& x = *static_cast<const upstream_config*>(a);
      const auto& y = *static_cast<const upstream_config*>(b);
      return x.api_key_env == y.api_key_env && x.api_key == y.api_key;
    },
    [](void* to, const void* from) {
      auto& x = *static_cast<upstream_config*>(to);
      const auto& y = *static_cast<const upstream_config*>(from);
      x.api_key_env = y.api_key_env;
      x.api_key = y.api_key;
    },
    nullptr,
};

const field_ops surfaces_ops{
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    [](const void* o) {
      const auto& u = *static_cast<const upstream_config*>(o);
      std::vector<std::string> served;
      for (std::size_t i = 0; i < surface_count; ++i) {
        const auto s = static_cast<surface>(i);
        if (serves(u.surfaces, s)) served.emplace_back(name_of(s));
      }
      return quote_list(served);
    },
    member<&upstream_config::surfaces>::same,
    member<&upstream_config::surfaces>::copy,
    nullptr,
};

// keys.sha256: printed masked, since a digest identifies a gateway token as well as the token
// does in logs and tickets.
const field_ops sha256_ops{
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    [](const void*) { return quote("<masked>"); },
    member<&key_config::sha256_hex>::same,
    member<&key_config::sha256_hex>::copy,
    nullptr,
};

// Omitted from `tether check` when empty: the engine's own series are meant.
template <auto M>
const field_ops omitted_when_empty{
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    [](const void* o) {
      return member<M>::of(o).empty() ? std::string() : quote(member<M>::of(o));
    },
    member<M>::same,
    member<M>::copy,
    nullptr,
};

constexpr std::string_view api_names[] = {"openai", "anthropic"};
constexpr std::string_view routing_names[] = {"least_work", "prefix"};
constexpr std::string_view engine_names[] = {"openai", "llamacpp", "vllm", "sglang"};
constexpr std::string_view stream_names[] = {"always", "as_requested"};
constexpr std::string_view priority_names[] = {"high", "normal", "low"};
constexpr std::string_view call_identity_names[] = {"session", "body", "off"};
constexpr std::string_view log_formats[] = {"json", "text"};
constexpr std::string_view log_levels[] = {"trace", "debug",    "info", "warn",
                                           "error", "critical", "off"};

constexpr std::string_view a_path =
    "`\"\"` or a path starting with `/`: visible ASCII (no spaces), ≤ 1024 bytes";
constexpr std::string_view a_host_port = "`\"host:port\"`";
constexpr std::string_view surfaces_range =
    "non-empty list of `\"chat\"`, `\"completions\"`, `\"embeddings\"`, `\"responses\"`, "
    "`\"messages\"`, `\"count_tokens\"`";

// --- the table -------------------------------------------------------------------------------

using S = server_config;
using R = request_config;
using B = budget_config;
using U = upstream_config;
using M = model_config;
using K = key_config;
using T = telemetry_config;
using C = cluster_config;
using L = ledger_config;

// One declaration per line (the formatter would break them into fragments). Builders: integer,
// duration, number, boolean, choice, text, list (member pointer, key, bounds, doc) and custom;
// then `| restart`, `| new_connections`, `| model_override`, `| required`, `| above_min`,
// `| needs_ledger`,
// `| note{..}` (what 0, "" or unset means, in `tether check`), `| default_is{..}` and
// `| range_is{..}` (the reference's columns where they are not generated).
// clang-format off
const setting table[] = {
    // [server]: read once at start. Sizes and counts of zero would refuse every request or
    // connection, and a zero header timeout every request before its first byte: at least 1.
    // glibc refuses a tcache_count above 65535; more than 1024 io threads is a typo, not a machine.
    custom(section::server, "listen", "`\"host:port\"` or `\"[v6]:port\"`", listen_ops, "where tether listens; port 0 picks a free port") | restart,
    integer<&S::max_request_bytes>("max_request_bytes", "bytes", 1, i64_max, "a larger request body: 413 payload_too_large") | restart,
    integer<&S::max_header_bytes>("max_header_bytes", "bytes", 1, i64_max, "larger request headers: 431 headers_too_large") | restart,
    integer<&S::max_header_fields>("max_header_fields", "count", 1, u32_max, "more header fields: 431 headers_too_large") | restart,
    integer<&S::max_json_depth>("max_json_depth", "count", 1, u32_max, "a deeper request JSON: 400 bad_request") | restart,
    integer<&S::max_connections>("max_connections", "count", 1, u32_max, "open client connections; one more is closed at once") | restart,
    duration<&S::header_timeout>("header_timeout_ms", 1, "time to receive a request's headers and body") | restart,
    duration<&S::keepalive_timeout>("keepalive_timeout_ms", 0, "an idle client connection's life; 0 = one response") | restart,
    duration<&S::drain_timeout>("drain_timeout_ms", 0, "on SIGTERM, how long requests in flight run on") | restart,
    boolean<&S::sched_batch>("sched_batch", "every thread under SCHED_BATCH") | restart,
    integer<&S::malloc_tcache_count>("malloc_tcache_count", "count", 0, 65535, "glibc's per-thread cache of freed blocks; 0 = glibc's") | restart,
    integer<&S::threads>("threads", "count", 0, 1024, "io threads; 0 = one per usable CPU") | restart,

    // [request]. The first six, call_window_ms and call_identity are a model's overrides too. deadline 0 = off (contract); the
    // attempt and idle timeouts have no "off" (a zero would fail every attempt or stream). More
    // than 100 retries of one model is a misconfiguration, not a policy. The retry budget (0 and
    // 0 admit no retry, a policy; above 100 % it is no budget) bounds an upstream's load whichever
    // model sends it: no override. Ten million affinity entries are a few hundred MiB.
    duration<&R::deadline>("deadline_ms", 0, "the whole request; 0 = no deadline") | model_override,
    duration<&R::attempt_timeout>("attempt_timeout_ms", 1, "one attempt, until its response is committed") | model_override,
    duration<&R::stream_idle_timeout>("stream_idle_timeout_ms", 1, "the longest gap between two events of a stream") | model_override,
    integer<&R::max_retries>("max_retries", "count", 0, 100, "retries per model of the chain") | model_override,
    duration<&R::retry_backoff>("retry_backoff_ms", 0, "base of the exponential backoff with full jitter") | model_override,
    integer<&R::max_response_bytes>("max_response_bytes", "bytes", 1, i64_max, "the largest non-streaming answer held") | model_override,
    integer<&R::min_retry_concurrency>("min_retry_concurrency", "count", 0, u32_max, "the retry budget per upstream: at least this many"),
    integer<&R::retry_budget_percent>("retry_budget_percent", "%", 0, 100, "the retry budget per upstream: this % of its requests"),
    integer<&R::response_affinity_max>("response_affinity_max", "count", 0, 10000000, "Responses ids remembered for previous_response_id; 0 = none"),
    duration<&R::call_window>("call_window_ms", 0, "a retry of a call that did not end ok, this long after its last try, keeps the call's deadline; 0 = off") | model_override,
    choice<&R::call_identity>("call_identity", call_identity_names, "what names a call besides its caller, surface, model and body: an Idempotency-Key or the client's session; the body alone; nothing (off)") | model_override,
    integer<&R::call_table_max>("call_table_max", "count", 0, 10000000, "unsuccessful calls remembered for call_window_ms; 0 = none"),

    // [budget]: a cap of 0 would admit nothing.
    integer<&B::max_in_flight>("max_in_flight", "count", 1, u32_max, "live upstream work across the gateway"),
    integer<&B::queue_max>("queue_max", "count", 0, u32_max, "attempts waiting for a slot; 0 = no queue"),
    duration<&B::queue_timeout>("queue_timeout_ms", 0, "the longest wait for a slot; 0 = until the deadline"),

    // [[upstreams]]. A weight of 0 would never get traffic (remove the deployment instead); past
    // 1000 a ratio is no longer a share anyone means. An ejection of 0 ms is none (ask for none
    // with eject_after_failures = 0). Checks or polls more often than every 100 ms would be load
    // on the upstream, not a signal.
    text<&U::name>("name", "string, unique, not empty", "how [[models]] refer to it") | required,
    custom(section::upstreams, "base_url", "`http://` or `https://` URL", base_url_ops, "the server root plus an optional path prefix, without /v1") | required | new_connections,
    custom(section::upstreams, "api_key_env", "an environment variable's name", api_key_env_ops, "the variable holding the upstream's key") | default_is{"`\"\"`"},
    choice<&U::api>("api", api_names, "the API the server speaks"),
    custom(section::upstreams, "surfaces", surfaces_range, surfaces_ops, "what its deployments serve") | default_is{"the `api`'s"},
    integer<&U::max_in_flight>("max_in_flight", "count", 1, u32_max, "live work on this upstream") | new_connections,
    integer<&U::max_tokens_in_flight>("max_tokens_in_flight", "tokens", 0, max_token_count, "the KV-cache budget of the server; 0 = off") | range_is{"tokens, 0–2⁴⁸"} | note{"no token cap"},
    duration<&U::connect_timeout>("connect_timeout_ms", 1, "resolve, connect and TLS handshake") | new_connections,
    duration<&U::idle_timeout>("idle_timeout_ms", 1, "an idle kept-alive connection's life") | new_connections,
    integer<&U::weight>("weight", "count", 1, 1000, "its share of a model's traffic"),
    integer<&U::eject_after_failures>("eject_after_failures", "count", 0, 1000, "consecutive failures that eject it; 0 = never") | note{"never ejected for failures"},
    duration<&U::eject_base>("eject_base_ms", 1, "the first ejection; doubles on each repeat"),
    duration<&U::eject_max>("eject_max_ms", 1, "the longest ejection") | range_is{"ms, ≥ 1, ≥ `eject_base_ms`"},
    text<&U::health_path>("health_path", a_path, "the active check's path; \"\" = none") | note{"no active check"},
    duration<&U::health_interval>("health_interval_ms", 100, "the time between two active checks"),
    choice<&U::engine>("engine", engine_names, "the model server behind the upstream"),
    choice<&U::upstream_stream>("upstream_stream", stream_names, "ask the upstream for a stream always") | default_is{"`\"always\"` for `engine = \"llamacpp\"`, else `\"as_requested\"`"},
    text<&U::metrics_path>("metrics_path", a_path, "the engine's metrics path; \"\" = not polled") | note{"the engine's metrics are not polled"},
    duration<&U::metrics_interval>("metrics_interval_ms", 100, "the time between two polls"),
    custom(section::upstreams, "metrics_running_series", "Prometheus metric names", omitted_when_empty<&U::metrics_running_series>, "the engine's series of running requests") | default_is{"the `engine`'s"},
    custom(section::upstreams, "metrics_queued_series", "Prometheus metric names", omitted_when_empty<&U::metrics_queued_series>, "the engine's series of queued requests") | default_is{"the `engine`'s"},
    duration<&U::release_grace_max>("release_grace_max_ms", 0, "a cancelled attempt's slot held until the engine let go, at most", 60000) | note{"a cancelled attempt's slot goes back at the close"},

    // [[models]] (and the model_override settings of [request])
    text<&M::name>("name", "string, not empty, not `\"*\"`", "the public name callers send") | required,
    text<&M::upstream>("upstream", "a configured upstream's name", "where it is served") | required,
    text<&M::upstream_model>("upstream_model", "string, not empty", "the model sent upstream") | default_is{"the `name`"},
    list<&M::fallbacks>("fallbacks", "list of configured model names", "tried in order once its attempts are spent"),
    integer<&M::default_max_tokens>("default_max_tokens", "tokens", 0, u32_max, "a request's output weight when it names none"),
    // prefix_bytes: 2048 bytes hold an agent's system prompt's opening (~500 tokens), enough to
    // tell agents apart; the bound keeps the per-request read of the prompt small.
    choice<&M::routing>("routing", routing_names, "how a deployment is chosen: least live work, or the prompt's prefix"),
    integer<&M::prefix_bytes>("prefix_bytes", "bytes", 16, 65536, "how much of the canonical prompt makes the affinity key"),
    // prefix_load_factor: above 1, or the bound would leave no room for a key's home to take it
    // ahead of the mean; at most 100, past which it bounds nothing.
    number<&M::prefix_load_factor>("prefix_load_factor", "number", 1, 100, "how far above the mean live work per weight a deployment keeps its keys") | above_min,
    // Prices: per deployment (each is its own upstream's price), so deployments may differ. A
    // million dollars per million tokens is past any model sold; more is a typo.
    number<&M::price_input_per_mtok>("price_input_per_mtok", "USD per million tokens", 0, 1000000, "the price of its prompt tokens; unset = they cost nothing") | default_is{"unset"} | note{"not priced: its prompt tokens cost nothing"},
    number<&M::price_output_per_mtok>("price_output_per_mtok", "USD per million tokens", 0, 1000000, "the price of its completion tokens; unset = they cost nothing") | default_is{"unset"} | note{"not priced: its completion tokens cost nothing"},
    number<&M::price_cached_input_per_mtok>("price_cached_input_per_mtok", "USD per million tokens", 0, 1000000, "the price of its prompt tokens read from the upstream's cache; unset = the input price") | default_is{"unset"} | note{"cached prompt tokens cost the input price"},

    // [[keys]]. A weight of 0 would never be served; the bound keeps one key's turn from dwarfing
    // the others' beyond what a ratio can mean.
    text<&K::name>("name", "string, unique, not empty", "the key's name") | required,
    custom(section::keys, "sha256", "64 hex digits, unique", sha256_ops, "the SHA-256 digest of the bearer token") | required,
    list<&K::models>("models", "list of model names, or `[\"*\"]`", "the models this key may use") | required,
    integer<&K::max_in_flight>("max_in_flight", "count", 0, u32_max, "live upstream work for this key; 0 = no cap"),
    integer<&K::rpm>("rpm", "requests per minute", 0, max_token_count, "requests per sliding minute; 0 = unlimited") | range_is{"requests per minute, 0–2⁴⁸"},
    integer<&K::tpm>("tpm", "tokens per minute", 0, max_token_count, "tokens per sliding minute; 0 = unlimited") | range_is{"tokens per minute, 0–2⁴⁸"},
    integer<&K::weight>("weight", "count", 1, 1000, "its share of the admission queue"),
    choice<&K::max_priority>("max_priority", priority_names, "the highest X-Priority it may take"),
    // The ledger's budgets (UTC periods). A billion dollars a day is past any key's means; the
    // bound keeps the sum in billionths of a dollar far from overflowing.
    integer<&K::max_tokens_per_day>("max_tokens_per_day", "tokens", 0, max_token_count, "prompt + completion tokens per UTC day; 0 = no budget") | range_is{"tokens, 0–2⁴⁸"} | note{"no daily token budget"} | needs_ledger,
    integer<&K::max_tokens_per_month>("max_tokens_per_month", "tokens", 0, max_token_count, "prompt + completion tokens per UTC month; 0 = no budget") | range_is{"tokens, 0–2⁴⁸"} | note{"no monthly token budget"} | needs_ledger,
    number<&K::max_spend_per_day>("max_spend_per_day", "USD", 0, max_spend_usd, "spend at the models' prices per UTC day; 0 = no budget") | range_is{"USD, 0–10⁹"} | note{"no daily spend budget"} | needs_ledger,
    number<&K::max_spend_per_month>("max_spend_per_month", "USD", 0, max_spend_usd, "spend at the models' prices per UTC month; 0 = no budget") | range_is{"USD, 0–10⁹"} | note{"no monthly spend budget"} | needs_ledger,
    boolean<&K::admin>("admin", "may read every key's usage (GET /v1/usage)") | needs_ledger,

    // [cluster]: read once at start.
    text<&C::budget_listen>("budget_listen", a_host_port, "this node hosts the shared budget there") | restart,
    text<&C::budget_host>("budget_host", a_host_port, "this node uses the shared budget there") | restart,
    duration<&C::lease_idle>("lease_idle_ms", 0, "a member keeps an idle slot this long") | restart,

    // [telemetry]: the log level applies at once, the rest at start.
    choice<&T::log_format>("log_format", log_formats, "one JSON object per line, or text") | restart,
    choice<&T::log_level>("log_level", log_levels, "access lines are written at info"),
    text<&T::otlp_endpoint>("otlp_endpoint", "an `http://` or `https://` URL", "where traces go (OTLP/HTTP JSON)") | restart,
    text<&T::service_name>("service_name", "string, not empty", "the traces' service name") | restart,

    // [ledger]: the actor and its file are made at start. Flushing more often than every 10 ms
    // is a write per batch of a few requests; less often than a minute, a kill -9 loses that much.
    boolean<&L::enabled>("enabled", "record every request's usage, and enforce the keys' budgets") | restart,
    text<&L::path>("path", "a file path, not a directory", "the SQLite file; a relative path is read from the config file's directory") | note{"tether-ledger.db next to the config file"} | restart,
    duration<&L::flush_interval>("flush_interval_ms", 10, "how often the gathered usage is written to the file", 60000) | restart,
    integer<&L::member_buffer_max>("member_buffer_max", "rows", 1, 10000000, "a cluster member cut off from the budget host keeps at most this many unsent rows") | restart,
};
// clang-format on

// A section's settings are contiguous in the table.
std::span<const setting> section_span(section s) {
  const auto* first = std::find_if(std::begin(table), std::end(table),
                                   [&](const setting& x) { return x.where == s; });
  const auto* last =
      std::find_if(first, std::end(table), [&](const setting& x) { return x.where != s; });
  return {first, last};
}

const void* default_owner(section s) {
  static const server_config server;
  static const request_config request;
  static const budget_config budget;
  static const upstream_config upstream;
  static const model_config model;
  static const key_config key;
  static const telemetry_config telemetry;
  static const cluster_config cluster;
  static const ledger_config ledger;
  switch (s) {
    case section::server:
      return &server;
    case section::request:
      return &request;
    case section::budget:
      return &budget;
    case section::upstreams:
      return &upstream;
    case section::models:
      return &model;
    case section::keys:
      return &key;
    case section::telemetry:
      return &telemetry;
    case section::ledger:
      return &ledger;
    case section::cluster:
      break;
  }
  return &cluster;
}

std::uint32_t override_bit(const setting& s) {
  const auto request = settings_of(section::request);
  return 1U << static_cast<unsigned>(&s - request.data());
}

}  // namespace

std::string_view name_of(section s) {
  switch (s) {
    case section::server:
      return "server";
    case section::request:
      return "request";
    case section::budget:
      return "budget";
    case section::upstreams:
      return "upstreams";
    case section::models:
      return "models";
    case section::keys:
      return "keys";
    case section::telemetry:
      return "telemetry";
    case section::ledger:
      return "ledger";
    case section::cluster:
      break;
  }
  return "cluster";
}

std::span<const setting> all_settings() {
  return table;
}

std::span<const setting> settings_of(section s) {
  // Found once: the table does not change.
  static const auto spans = [] {
    std::array<std::span<const setting>, section_count> out;
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = section_span(static_cast<section>(i));
    return out;
  }();
  return spans[static_cast<std::size_t>(s)];
}

request_config apply_overrides(const request_overrides& o, request_config base) {
  for (const auto& s : settings_of(section::request)) {
    if (is_written(o, s)) s.ops->copy(&base, &o.values);
  }
  return base;
}

void mark_written(request_overrides& o, const setting& s) {
  o.written |= override_bit(s);
}

bool is_written(const request_overrides& o, const setting& s) {
  return s.model_override && (o.written & override_bit(s)) != 0;
}

bool request_overrides::operator==(const request_overrides& other) const {
  if (written != other.written) return false;
  for (const auto& s : settings_of(section::request)) {
    if (is_written(*this, s) && !s.ops->same(&values, &other.values)) return false;
  }
  return true;
}

bool in_use(const setting& s, const void* owner) {
  switch (s.type) {
    case setting_type::number: {
      const auto v = s.ops->get_number(owner);
      return v && *v != 0;
    }
    case setting_type::integer:
    case setting_type::duration:
    case setting_type::boolean:
      return s.ops->get_int(owner) != 0;
    default:
      return false;
  }
}

std::string default_toml(const setting& s) {
  return s.ops->toml(default_owner(s.where));
}

std::string default_text(const setting& s) {
  if (!s.default_doc.empty()) return std::string(s.default_doc);
  if (s.required) return "required";
  return fmt::format("`{}`", default_toml(s));
}

std::string range_text(const setting& s) {
  if (!s.range_doc.empty()) return std::string(s.range_doc);
  switch (s.type) {
    case setting_type::integer:
    case setting_type::duration: {
      const bool unbounded = s.max == i64_max || s.max == u32_max ||
                             (s.type == setting_type::duration && s.max == max_duration_ms);
      if (unbounded) return fmt::format("{}, ≥ {}", s.unit, s.min);
      return fmt::format("{}, {}–{}", s.unit, s.min, s.max);
    }
    case setting_type::number:
      if (s.above_min) return fmt::format("{}, > {}, ≤ {}", s.unit, s.min, s.max);
      if (s.max == i64_max) return fmt::format("{}, ≥ {}", s.unit, s.min);
      return fmt::format("{}, {}–{}", s.unit, s.min, s.max);
    case setting_type::boolean:
      return "boolean";
    case setting_type::choice: {
      std::string out;
      for (std::size_t i = 0; i < s.choices.size(); ++i) {
        if (i > 0) out += i + 1 == s.choices.size() ? " or " : ", ";
        out += fmt::format("`\"{}\"`", s.choices[i]);
      }
      return out;
    }
    default:
      return "";
  }
}

std::string reference_row(const setting& s) {
  return fmt::format("| `{}` | {} | {} | {} |", s.key, default_text(s), range_text(s), s.doc);
}

}  // namespace tether::config
