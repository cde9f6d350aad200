#include "tests/support/mock_server.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
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
  if (options.path_prefix) args.insert(args.end(), {"--path-prefix", *options.path_prefix});
  args.insert(args.end(), options.extra_args.begin(), options.extra_args.end());
  return args;
}

// With a gate, the child is a shell that waits for a line on the gate's FIFO and then becomes
// tether-mock with the same arguments.
std::vector<std::string> child_args(const mock_options& options, const std::string* fifo) {
  auto args = mock_args(options);
  if (fifo == nullptr) return args;
  std::vector<std::string> shell{"-c", R"(read -r _ < "$0" && exec "$@")", *fifo,
                                 TETHER_MOCK_BINARY};
  shell.insert(shell.end(), args.begin(), args.end());
  return shell;
}

}  // namespace

mock_server::gate::gate() : fifo((dir.path() / "gate").string()) {
  if (::mkfifo(fifo.c_str(), 0600) != 0) {
    throw std::runtime_error("mkfifo " + fifo + ": " + std::strerror(errno));
  }
}

mock_server::mock_server(mock_options options) : mock_server(std::move(options), nullptr) {}

mock_server::mock_server(mock_options options, std::unique_ptr<gate> standby_gate)
    : gate_(std::move(standby_gate)),
      process_(gate_ ? "/bin/sh" : TETHER_MOCK_BINARY,
               child_args(options, gate_ ? &gate_->fifo : nullptr)),
      tls_(options.tls_cert.has_value() && options.tls_key.has_value()) {
  if (!gate_) await_listening();
}

std::unique_ptr<mock_server> mock_server::standby(mock_options options) {
  return std::unique_ptr<mock_server>(
      new mock_server(std::move(options), std::make_unique<gate>()));
}

void mock_server::release() {
  if (!gate_ || port_ != 0) return;
  // Non-blocking, so that a shell that never reached its read cannot hang the test: the open
  // fails (ENXIO) until the reader is there.
  const auto until = test_clock::now() + std::chrono::seconds(5);
  int fd = -1;
  while ((fd = ::open(gate_->fifo.c_str(), O_WRONLY | O_NONBLOCK)) < 0) {
    if (errno != ENXIO || test_clock::now() >= until) {
      throw std::runtime_error("cannot open the standby mock's gate: " +
                               std::string(std::strerror(errno)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const bool written = ::write(fd, "go\n", 3) == 3;
  ::close(fd);
  if (!written) throw std::runtime_error("cannot write the standby mock's gate");
  await_listening();
}

void mock_server::await_listening() {
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

void mock_server::set_health(int status) {
  const auto target = "/_health?status=" + std::to_string(status);
  auto response = tls_ ? https_request("POST", port_, target) : request("POST", port_, target);
  if (response.status != 200) {
    throw std::runtime_error("POST /_health answered " + std::to_string(response.status));
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
