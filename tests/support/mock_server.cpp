#include "tests/support/mock_server.hpp"

#include <csignal>
#include <regex>
#include <stdexcept>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "tests/support/http_client.hpp"

namespace tether::test {
namespace {

std::vector<std::string> mock_args(const mock_options& options) {
  std::vector<std::string> args{"--listen",
                                "127.0.0.1:" + std::to_string(options.port.value_or(0))};
  if (options.tls_cert && options.tls_key) {
    args.insert(args.end(), {"--tls-cert", *options.tls_cert, "--tls-key", *options.tls_key});
  }
  return args;
}

}  // namespace

mock_server::mock_server(mock_options options)
    : process_(TETHER_MOCK_BINARY, mock_args(options)),
      tls_(options.tls_cert.has_value() && options.tls_key.has_value()) {
  static const std::regex listening(R"(tether-mock listening on 127\.0\.0\.1:(\d+))");
  auto line = process_.wait_for_line(listening, std::chrono::seconds(10));
  if (!line) {
    throw std::runtime_error("tether-mock did not start listening; output:\n" + process_.output());
  }
  port_ = static_cast<std::uint16_t>(std::stoi(line->groups.at(1)));
}

std::string mock_server::url() const {
  return std::string(tls_ ? "https" : "http") + "://127.0.0.1:" + std::to_string(port_);
}

boost::json::object mock_server::stats(std::optional<std::uint64_t> since) {
  std::string target = "/_stats";
  if (since) target += "?since=" + std::to_string(*since);
  auto response = tls_ ? https_request("GET", port_, target) : request("GET", port_, target);
  if (response.status != 200) {
    throw std::runtime_error("GET /_stats answered " + std::to_string(response.status));
  }
  return response.json().as_object();
}

boost::json::object mock_server::wait_for_stats(
    const std::function<bool(const boost::json::object&)>& done,
    std::chrono::milliseconds timeout) {
  const auto deadline = test_clock::now() + timeout;
  while (true) {
    auto current = stats();
    if (done(current) || test_clock::now() >= deadline) return current;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void mock_server::reset() {
  auto response =
      tls_ ? https_request("POST", port_, "/_reset") : request("POST", port_, "/_reset");
  if (response.status != 200) {
    throw std::runtime_error("POST /_reset answered " + std::to_string(response.status));
  }
}

void mock_server::kill() {
  process_.send_signal(SIGKILL);
  if (!process_.wait_exit(std::chrono::seconds(5))) {
    throw std::runtime_error("tether-mock did not exit after SIGKILL");
  }
}

const boost::json::object& log_entry(const boost::json::object& stats, std::size_t index) {
  return stats.at("log").as_array().at(index).as_object();
}

}  // namespace tether::test
