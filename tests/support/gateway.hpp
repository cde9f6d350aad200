// A tether gateway child process started from a TOML text, on the port it reports.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

namespace tether::test {

class gateway_process {
 public:
  // Writes `toml` to a temp file, runs `tether --config FILE` (plus extra_args) with extra_env,
  // and waits (10 s at most) for "listening on 127.0.0.1:PORT"; throws if it never comes.
  explicit gateway_process(const std::string& toml, env_list extra_env = {},
                           std::vector<std::string> extra_args = {});

  std::uint16_t port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& config_path() const { return config_path_; }
  child_process& process() { return *process_; }

 private:
  temp_dir dir_;
  std::string config_path_;
  std::unique_ptr<child_process> process_;
  std::uint16_t port_ = 0;
};

}  // namespace tether::test
