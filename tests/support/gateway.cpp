#include "tests/support/gateway.hpp"

#include <regex>
#include <stdexcept>

namespace tether::test {

gateway_process::gateway_process(const std::string& toml, env_list extra_env,
                                 std::vector<std::string> extra_args)
    : config_path_(dir_.write_file("tether.toml", toml).string()) {
  std::vector<std::string> args{"--config", config_path_};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  process_ = std::make_unique<child_process>(TETHER_BINARY, std::move(args), std::move(extra_env));
  // "tether 0.1.0 listening on …", not "shared budget listening on …" (a budget host logs both).
  static const std::regex listening(R"(tether \S+ listening on 127\.0\.0\.1:(\d+))");
  auto line = process_->wait_for_line(listening, std::chrono::seconds(10));
  if (!line) {
    throw std::runtime_error("tether did not start listening; output:\n" + process_->output());
  }
  port_ = static_cast<std::uint16_t>(std::stoi(line->groups.at(1)));
}

}  // namespace tether::test
