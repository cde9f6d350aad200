#include "config/config.hpp"

#include <filesystem>

#include "config/settings.hpp"

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

std::string_view name_of(call_identity_mode mode) {
  switch (mode) {
    case call_identity_mode::body:
      return "body";
    case call_identity_mode::off:
      return "off";
    case call_identity_mode::session:
      break;
  }
  return "session";
}

std::string_view name_of(routing_mode mode) {
  return mode == routing_mode::prefix ? "prefix" : "least_work";
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
  for (const auto& m : models) {
    if (m.name == model_name) return apply_overrides(m.overrides, request);
  }
  return request;
}

std::string gateway_config::ledger_file() const {
  const std::filesystem::path written = ledger.path.empty() ? "tether-ledger.db" : ledger.path;
  if (written.is_absolute()) return written.string();
  return (std::filesystem::path(source_file).parent_path() / written).string();
}

}  // namespace tether::config
