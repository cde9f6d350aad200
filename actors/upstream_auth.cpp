#include "actors/upstream_auth.hpp"

#include <string>

namespace tether {

void add_upstream_auth(net::header_list& headers, const config::upstream_config& up,
                       std::string_view anthropic_version, std::string_view anthropic_beta) {
  const bool anthropic = up.api == config::upstream_api::anthropic;
  if (!up.api_key.empty()) {
    if (anthropic) {
      headers.push_back({"x-api-key", up.api_key});
    } else {
      headers.push_back({"authorization", "Bearer " + up.api_key});
    }
  }
  if (!anthropic_version.empty()) {
    headers.push_back({"anthropic-version", std::string(anthropic_version)});
  } else if (anthropic) {
    headers.push_back({"anthropic-version", std::string(default_anthropic_version)});
  }
  if (!anthropic_beta.empty()) headers.push_back({"anthropic-beta", std::string(anthropic_beta)});
}

}  // namespace tether
