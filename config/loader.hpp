// Loads and validates a TOML file into a gateway_config. Every error names the file, the key
// and the problem; the caller refuses to start on any error.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace tether::config {

struct load_result {
  std::optional<gateway_config> config;  // set when errors is empty
  std::vector<std::string> errors;       // "FILE: KEY: problem"
};

// getenv is injectable so tests control PROXY_REQUEST_DEADLINE / PROXY_REQUEST_TIMEOUT and keys.
using env_lookup = std::function<std::optional<std::string>(const std::string&)>;
env_lookup process_env();

load_result load_file(const std::string& path, const env_lookup& env = process_env());
load_result load_string(const std::string& toml_text, const std::string& source_name,
                        const env_lookup& env = process_env());

// The effective config as TOML, secrets masked (api keys, key digests), for `tether check`.
std::string render_effective(const gateway_config& cfg);

}  // namespace tether::config
