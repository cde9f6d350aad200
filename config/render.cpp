// The effective config as TOML for `tether check`. Written by hand rather than through toml++'s
// formatter: the output keeps the file's section order and carries comments (key set/missing,
// a model's effective [request] values), and toml++'s formatter would sort keys and drop both.
//
// Secrets: an upstream's key is never printed, only the variable that holds it; a [[keys]]
// digest is printed as "<masked>", because a digest identifies a gateway token as well as the
// token does in logs and tickets.
#include <fmt/format.h>

#include <string>
#include <string_view>

#include "config/loader.hpp"

namespace tether::config {
namespace {

// A TOML basic string: quotes, backslashes and control characters escaped.
std::string quote(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          out += fmt::format("\\u{:04X}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

std::string quote_list(const std::vector<std::string>& items) {
  std::string out = "[";
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    out += quote(items[i]);
  }
  out += "]";
  return out;
}

std::string host_port(const std::string& host, std::uint16_t port) {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

}  // namespace

std::string render_effective(const gateway_config& cfg) {
  std::string o;
  const auto line = [&o](std::string_view key, const auto& value) {
    o += fmt::format("{} = {}\n", key, value);
  };
  o += fmt::format(
      "# Effective configuration{}{}; defaults and environment overrides applied, "
      "secrets masked.\n",
      cfg.source_file.empty() ? "" : " of ", cfg.source_file.empty() ? "" : quote(cfg.source_file));

  const auto& s = cfg.server;
  o += "\n[server]\n";
  line("listen", quote(host_port(s.listen_host, s.listen_port)));
  line("max_request_bytes", s.max_request_bytes);
  line("max_header_bytes", s.max_header_bytes);
  line("max_header_fields", s.max_header_fields);
  line("max_json_depth", s.max_json_depth);
  line("max_connections", s.max_connections);
  line("header_timeout_ms", s.header_timeout.count());
  line("keepalive_timeout_ms", s.keepalive_timeout.count());
  line("drain_timeout_ms", s.drain_timeout.count());
  line("sched_batch", s.sched_batch ? "true" : "false");
  line("malloc_tcache_count", s.malloc_tcache_count);
  line("threads", s.threads);

  const auto& r = cfg.request;
  o += "\n[request]\n";
  line("deadline_ms", r.deadline.count());
  line("attempt_timeout_ms", r.attempt_timeout.count());
  line("stream_idle_timeout_ms", r.stream_idle_timeout.count());
  line("max_retries", r.max_retries);
  line("retry_backoff_ms", r.retry_backoff.count());
  line("max_response_bytes", r.max_response_bytes);
  line("min_retry_concurrency", r.min_retry_concurrency);
  line("retry_budget_percent", r.retry_budget_percent);
  line("response_affinity_max", r.response_affinity_max);

  const auto& b = cfg.budget;
  o += "\n[budget]\n";
  line("max_in_flight", b.max_in_flight);
  line("queue_max", b.queue_max);
  line("queue_timeout_ms", b.queue_timeout.count());

  for (const auto& u : cfg.upstreams) {
    o += "\n[[upstreams]]\n";
    line("name", quote(u.name));
    line("base_url", quote(u.base_url));
    o += fmt::format("# resolved: {}://{}, path prefix {}\n", u.url.tls ? "https" : "http",
                     host_port(u.url.host, u.url.port), quote(u.url.path_prefix));
    if (u.api_key_env.empty()) {
      o += "api_key_env = \"\"  # no key sent\n";
    } else {
      o += fmt::format("api_key_env = {}  # key: {}\n", quote(u.api_key_env),
                       u.api_key.empty() ? "missing" : "set");
    }
    line("api", quote(std::string(name_of(u.api))));
    std::vector<std::string> served;
    for (std::size_t i = 0; i < surface_count; ++i) {
      const auto s = static_cast<surface>(i);
      if (serves(u.surfaces, s)) served.emplace_back(name_of(s));
    }
    line("surfaces", quote_list(served));
    line("max_in_flight", u.max_in_flight);
    if (u.max_tokens_in_flight == 0) {
      o += "max_tokens_in_flight = 0  # no token cap\n";
    } else {
      line("max_tokens_in_flight", u.max_tokens_in_flight);
    }
    line("connect_timeout_ms", u.connect_timeout.count());
    line("idle_timeout_ms", u.idle_timeout.count());
    line("weight", u.weight);
    if (u.eject_after_failures == 0) {
      o += "eject_after_failures = 0  # never ejected for failures\n";
    } else {
      line("eject_after_failures", u.eject_after_failures);
    }
    line("eject_base_ms", u.eject_base.count());
    line("eject_max_ms", u.eject_max.count());
    if (u.health_path.empty()) {
      o += "health_path = \"\"  # no active check\n";
    } else {
      line("health_path", quote(u.health_path));
    }
    line("health_interval_ms", u.health_interval.count());
    line("engine", quote(std::string(name_of(u.engine))));
    line("upstream_stream", quote(std::string(name_of(u.upstream_stream))));
    if (u.metrics_path.empty()) {
      o += "metrics_path = \"\"  # the engine's metrics are not polled\n";
    } else {
      line("metrics_path", quote(u.metrics_path));
    }
    line("metrics_interval_ms", u.metrics_interval.count());
    if (!u.metrics_running_series.empty())
      line("metrics_running_series", quote(u.metrics_running_series));
    if (!u.metrics_queued_series.empty())
      line("metrics_queued_series", quote(u.metrics_queued_series));
    if (u.release_grace_max.count() == 0) {
      o += "release_grace_max_ms = 0  # a cancelled attempt's slot goes back at the close\n";
    } else {
      line("release_grace_max_ms", u.release_grace_max.count());
    }
  }

  for (const auto& m : cfg.models) {
    o += "\n[[models]]\n";
    line("name", quote(m.name));
    line("upstream", quote(m.upstream));
    line("upstream_model", quote(m.upstream_model));
    line("fallbacks", quote_list(m.fallbacks));
    line("default_max_tokens", m.default_max_tokens);
    // Only the overrides written for this model are keys; the values it runs with are a
    // comment, so the output reloads with the same overrides and no more.
    const auto& v = m.overrides;
    if (v.deadline) line("deadline_ms", v.deadline->count());
    if (v.attempt_timeout) line("attempt_timeout_ms", v.attempt_timeout->count());
    if (v.stream_idle_timeout) line("stream_idle_timeout_ms", v.stream_idle_timeout->count());
    if (v.max_retries) line("max_retries", *v.max_retries);
    if (v.retry_backoff) line("retry_backoff_ms", v.retry_backoff->count());
    if (v.max_response_bytes) line("max_response_bytes", *v.max_response_bytes);
    const auto e = cfg.effective_request(m.name);
    o += fmt::format(
        "# effective: deadline_ms={} attempt_timeout_ms={} stream_idle_timeout_ms={} "
        "max_retries={} retry_backoff_ms={} max_response_bytes={}\n",
        e.deadline.count(), e.attempt_timeout.count(), e.stream_idle_timeout.count(), e.max_retries,
        e.retry_backoff.count(), e.max_response_bytes);
  }

  for (const auto& k : cfg.keys) {
    o += "\n[[keys]]\n";
    line("name", quote(k.name));
    line("sha256", quote("<masked>"));
    line("models", quote_list(k.models));
    line("max_in_flight", k.max_in_flight);
    line("rpm", k.rpm);
    line("tpm", k.tpm);
    line("weight", k.weight);
    line("max_priority", quote(name_of(k.max_priority)));
  }

  const auto& t = cfg.telemetry;
  o += "\n[telemetry]\n";
  line("log_format", quote(t.log_format));
  line("log_level", quote(t.log_level));
  line("otlp_endpoint", quote(t.otlp_endpoint));
  line("service_name", quote(t.service_name));

  o += "\n[cluster]\n";
  line("budget_listen", quote(cfg.cluster.budget_listen));
  line("budget_host", quote(cfg.cluster.budget_host));
  line("lease_idle_ms", cfg.cluster.lease_idle.count());
  return o;
}

}  // namespace tether::config
