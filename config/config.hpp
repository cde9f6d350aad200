// The effective gateway configuration: plain values, no toml++ types (config/ alone includes it).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "config/priority.hpp"
#include "config/surface.hpp"

namespace tether::config {

using millis = std::chrono::milliseconds;

struct server_config {
  std::string listen_host = "127.0.0.1";
  std::uint16_t listen_port = 8080;
  std::uint64_t max_request_bytes = 4194304;
  std::uint64_t max_header_bytes = 16384;
  std::uint32_t max_header_fields = 100;
  std::uint32_t max_json_depth = 128;
  std::uint32_t max_connections = 10000;
  millis header_timeout{10000};
  millis keepalive_timeout{60000};
  millis drain_timeout{30000};
  // Process-wide settings, applied once at start: SCHED_BATCH for every thread (off by default,
  // actors/main.cpp says why), and glibc's per-thread cache of freed blocks (0 = glibc's own
  // default, and no restart to apply it).
  bool sched_batch = false;
  std::uint32_t malloc_tcache_count = 64;
  // io threads (each with its share of the connections and its own CAF worker); 0 = one per CPU
  // of the process's affinity mask. Applied at start only.
  std::uint32_t threads = 0;
  bool operator==(const server_config&) const = default;
};

// How the gateway tells a client's retry of a call (docs/contract.md, "One call, one deadline"):
// by an Idempotency-Key or the client's session header, by the body alone, or not at all.
enum class call_identity_mode { session, body, off };
std::string_view name_of(call_identity_mode mode);

// The [request] keys; also the shape of a model's overrides (every field optional there).
struct request_config {
  millis deadline{300000};  // 0 = off
  millis attempt_timeout{120000};
  millis stream_idle_timeout{60000};
  std::uint32_t max_retries = 2;
  millis retry_backoff{100};
  std::uint64_t max_response_bytes = 33554432;
  // The retry budget per upstream ([request] only, not a model override: it bounds an
  // upstream's load, whichever model sends it): retries in flight to an upstream stay within
  // max(min_retry_concurrency, retry_budget_percent % of its requests in flight).
  std::uint32_t min_retry_concurrency = 3;
  std::uint32_t retry_budget_percent = 20;
  // How many Responses API ids the gateway remembers the upstream of, for previous_response_id
  // ([request] only; 0 = no affinity).
  std::uint32_t response_affinity_max = 100000;
  // A client's retry of a call that did not end ok, within this long of its last try's end,
  // gets only what is left of the call's first deadline (0 = off), the call told by
  // call_identity; the process remembers at most call_table_max such calls ([request] only).
  millis call_window{120000};
  call_identity_mode call_identity = call_identity_mode::session;
  std::uint32_t call_table_max = 16384;
  bool operator==(const request_config&) const = default;
};

// A model's overrides of [request]: the values its entry writes (the settings declared
// model_override in config/settings.cpp); the others come from [request]. Merged by
// apply_overrides (config/settings.hpp), the one place that does it.
struct request_overrides {
  request_config values;
  std::uint32_t written = 0;  // one bit per [request] setting, by its place in the table
  // Equal when the same settings are written with the same values.
  bool operator==(const request_overrides&) const;
};

struct budget_config {
  std::uint32_t max_in_flight = 512;
  std::uint32_t queue_max = 2048;
  millis queue_timeout{0};  // 0 = until the deadline
  bool operator==(const budget_config&) const = default;
};

// A parsed base_url: scheme, host, port, optional path prefix (no trailing slash, no /v1).
struct upstream_url {
  bool tls = false;
  std::string host;
  std::uint16_t port = 80;
  std::string path_prefix;  // "" or "/something"
};

// The API an upstream speaks: which surfaces it serves by default and how it is sent the key.
enum class upstream_api { openai, anthropic };
std::string_view name_of(upstream_api api);
// openai: chat, completions, embeddings, responses; anthropic: messages, count_tokens.
constexpr surface_set default_surfaces(upstream_api api) {
  return api == upstream_api::anthropic
             ? static_cast<surface_set>(bit_of(surface::messages) | bit_of(surface::count_tokens))
             : static_cast<surface_set>(bit_of(surface::chat) | bit_of(surface::completions) |
                                        bit_of(surface::embeddings) | bit_of(surface::responses));
}

// The model server behind an upstream, where tether must know it: how its running and queued
// work are named in its metrics, and what besides closing the connection stops its work.
// openai = nothing engine-specific (a hosted API, or an engine tether need not know).
enum class engine_kind { openai, llamacpp, vllm, sglang };
std::string_view name_of(engine_kind engine);

// Whether a caller's non-streaming request is sent to the upstream as a stream (and its answer
// assembled by tether): some engines notice a closed connection only when they write to it.
enum class upstream_stream_mode { as_requested, always };
std::string_view name_of(upstream_stream_mode mode);

// How a model's deployment is chosen: by least live work (two drawn, the lighter taken), or by
// the request's prompt prefix on a consistent-hash ring with bounded loads, so that a
// conversation's turns find the engine that holds its prefix in its cache.
enum class routing_mode { least_work, prefix };
std::string_view name_of(routing_mode mode);
// The default for an engine: llama.cpp checks a non-streaming request's connection only when no
// result was produced for a second, so with other traffic an abandoned one runs to max_tokens.
constexpr upstream_stream_mode default_upstream_stream(engine_kind engine) {
  return engine == engine_kind::llamacpp ? upstream_stream_mode::always
                                         : upstream_stream_mode::as_requested;
}

struct upstream_config {
  std::string name;
  std::string base_url;  // as written, for display
  upstream_url url;
  upstream_api api = upstream_api::openai;
  // What its deployments serve: the api's defaults, or the `surfaces` list as written.
  surface_set surfaces = default_surfaces(upstream_api::openai);
  std::string api_key_env;  // name of the env variable, may be empty
  std::string api_key;      // resolved at load; never printed
  std::uint32_t max_in_flight = 64;
  // 0 = off. Else the budget also holds each request's token weight (estimated prompt + the
  // output it may make) against this cap until its connection actor exits: a model server's
  // real capacity is its KV cache, tokens in flight, not requests.
  std::uint64_t max_tokens_in_flight = 0;
  millis connect_timeout{2000};
  // How long a kept-alive connection may wait for its next request. Below the common model
  // servers' own keep-alive timeouts (uvicorn's, under vLLM, is 5 s), so that tether, not the
  // server, is the one that closes an idle connection.
  millis idle_timeout{4000};
  // Health (docs/contract.md, "Upstream health"): the share of a model's traffic among its
  // healthy deployments, and when the gateway stops sending it attempts.
  std::uint32_t weight = 1;
  std::uint32_t eject_after_failures = 5;  // consecutive failed attempts; 0 = never eject
  millis eject_base{5000};                 // first ejection; doubles on each repeat
  millis eject_max{300000};
  std::string health_path;  // "" = no active check; else GET it every health_interval_ms
  millis health_interval{5000};
  // The engine (docs/contract.md, "The work ends in the engine").
  engine_kind engine = engine_kind::openai;
  upstream_stream_mode upstream_stream = upstream_stream_mode::as_requested;
  std::string metrics_path;  // "" = the engine's metrics are not polled
  millis metrics_interval{1000};
  // The Prometheus series of the engine's running and queued requests; "" = the engine's own.
  std::string metrics_running_series;
  std::string metrics_queued_series;
  // A cancelled attempt's slot is held until the engine let go: at most this long after the
  // socket closed. 0 = released when the socket closed.
  millis release_grace_max{500};
  // Removed by a reload, kept in its place so that every upstream keeps its index (the budget,
  // the metrics and the requests still in flight count by index). No model routes to it.
  bool retired = false;
};

// One [[models]] entry: a deployment of a public model name on one upstream.
struct model_config {
  std::string name;
  std::string upstream;
  std::string upstream_model;  // defaults to name
  std::vector<std::string> fallbacks;
  request_overrides overrides;
  // The output weight of a request that names no max_tokens / max_completion_tokens /
  // max_output_tokens.
  std::uint32_t default_max_tokens = 1024;
  routing_mode routing = routing_mode::least_work;
  // routing = "prefix": how much of the canonical prompt makes the affinity key, and how far
  // above the mean live work per weight a deployment may take its keys before they spill.
  std::uint32_t prefix_bytes = 2048;
  double prefix_load_factor = 1.25;
  // The ledger's prices (docs/contract.md, "The ledger"), USD per million tokens; unset: the
  // model's tokens cost nothing. Unset cached: cached prompt tokens cost the input price.
  std::optional<double> price_input_per_mtok;
  std::optional<double> price_output_per_mtok;
  std::optional<double> price_cached_input_per_mtok;
  bool operator==(const model_config&) const = default;
};

struct key_config {
  std::string name;
  std::string sha256_hex;           // lower-case hex digest of the bearer token
  std::vector<std::string> models;  // "*" = all
  std::uint32_t max_in_flight = 0;  // 0 = no per-key cap
  // Over a sliding minute, counted by the budget (the budget host's: the cluster's); 0 =
  // unlimited. Tokens are prompt + completion: estimated at admission, corrected by usage.
  std::uint64_t rpm = 0;
  std::uint64_t tpm = 0;
  // The key's share of the admission queue when keys compete for slots: waiting requests are
  // admitted round-robin across keys in proportion to it.
  std::uint32_t weight = 1;
  // The highest X-Priority this key's requests may take; a higher one asked for is lowered to it.
  priority max_priority = priority::normal;
  // The ledger's budgets (UTC periods; 0 = none): tokens are prompt + completion, spend is USD
  // at the models' prices. Past one, a request is refused at admission.
  std::uint64_t max_tokens_per_day = 0;
  std::uint64_t max_tokens_per_month = 0;
  double max_spend_per_day = 0;
  double max_spend_per_month = 0;
  // May read every key's usage (GET /v1/usage).
  bool admin = false;
  bool retired = false;  // removed by a reload: kept in its place, matches no token
};

struct telemetry_config {
  std::string log_format = "json";  // json | text
  std::string log_level = "info";
  std::string otlp_endpoint;
  std::string service_name = "tether";
  bool operator==(const telemetry_config&) const = default;
};

struct cluster_config {
  std::string budget_listen;  // host:port, empty = not hosting
  std::string budget_host;    // host:port, empty = not a member
  // A member keeps a slot whose work ended this long for its next request (0: gives it back
  // at once, so every acquire is a round trip to the host).
  millis lease_idle{1000};
  bool operator==(const cluster_config&) const = default;
};

// The ledger (docs/contract.md, "The ledger"): per key × model × upstream × hour, in SQLite.
struct ledger_config {
  bool enabled = true;
  std::string path;  // "" = tether-ledger.db next to the config file
  millis flush_interval{1000};
  // A cluster member cut off from its budget host keeps at most this many unsent rows.
  std::uint32_t member_buffer_max = 100000;
  bool operator==(const ledger_config&) const = default;
};

// At most this many upstreams, counting those a reload removed (each keeps its index while the
// gateway runs): the per-upstream metrics are fixed arrays of this size.
inline constexpr std::size_t max_upstreams = 1024;

struct gateway_config {
  std::string source_file;
  server_config server;
  request_config request;
  budget_config budget;
  std::vector<upstream_config> upstreams;
  std::vector<model_config> models;
  std::vector<key_config> keys;
  telemetry_config telemetry;
  cluster_config cluster;
  ledger_config ledger;

  const upstream_config* find_upstream(const std::string& name) const;
  // Whether model requests must carry a gateway key: some [[keys]] entry is in force.
  bool requires_keys() const;
  // The [request] settings with a model's overrides applied (first deployment of that name).
  request_config effective_request(const std::string& model_name) const;
  // The ledger's file: [ledger] path, a relative one read from the config file's directory;
  // unset, tether-ledger.db there (the working directory without a config file).
  std::string ledger_file() const;
};

}  // namespace tether::config
