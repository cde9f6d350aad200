#include "config/config.hpp"

namespace tether::config {

std::string_view name_of(upstream_api api) {
  return api == upstream_api::anthropic ? "anthropic" : "openai";
}

std::string_view name_of(engine_kind engine) {
  switch (engine) {
    case engine_kind::llamacpp:
      return "llamacpp";
    case engine_kind::vllm:
      return "vllm";
    case engine_kind::sglang:
      return "sglang";
    case engine_kind::openai:
      break;
  }
  return "openai";
}

std::string_view name_of(upstream_stream_mode mode) {
  return mode == upstream_stream_mode::always ? "always" : "as_requested";
}

const upstream_config* gateway_config::find_upstream(const std::string& name) const {
  for (const auto& u : upstreams) {
    if (u.name == name && !u.retired) return &u;
  }
  return nullptr;
}

bool gateway_config::requires_keys() const {
  for (const auto& k : keys) {
    if (!k.retired) return true;
  }
  return false;
}

// The loader rejects deployments of one name that disagree on overrides, so the first one
// speaks for all of them.
request_config gateway_config::effective_request(const std::string& model_name) const {
  request_config r = request;
  for (const auto& m : models) {
    if (m.name != model_name) continue;
    const auto& o = m.overrides;
    if (o.deadline) r.deadline = *o.deadline;
    if (o.attempt_timeout) r.attempt_timeout = *o.attempt_timeout;
    if (o.stream_idle_timeout) r.stream_idle_timeout = *o.stream_idle_timeout;
    if (o.max_retries) r.max_retries = *o.max_retries;
    if (o.retry_backoff) r.retry_backoff = *o.retry_backoff;
    if (o.max_response_bytes) r.max_response_bytes = *o.max_response_bytes;
    break;
  }
  return r;
}

}  // namespace tether::config
