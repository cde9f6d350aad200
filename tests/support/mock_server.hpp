// A tether-mock child process on an ephemeral (or a given) port, and its observation endpoints.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

namespace tether::test {

struct mock_options {
  std::optional<std::string> tls_cert;  // with tls_key: the mock serves HTTPS only
  std::optional<std::string> tls_key;
  // A fixed port instead of an ephemeral one: to restart an upstream where the gateway's config
  // already points (the port a killed mock listened on).
  std::optional<std::uint16_t> port;
  // The mock serves its API under this path (--path-prefix), as a provider behind a URL prefix;
  // /health and the control endpoints stay at the root, and url() still names the root.
  std::optional<std::string> path_prefix;
  // More command-line flags, as given (e.g. {"--close-after-stream", "300"}).
  std::vector<std::string> extra_args;
};

class mock_server {
 public:
  // Starts the mock and waits (10 s at most) for its listening line; throws if it never comes.
  explicit mock_server(mock_options options = {});

  // A mock whose process starts now but becomes tether-mock only at release(): a child inherits
  // every descriptor of this process that lacks close-on-exec (the test clients' sockets do), so
  // one started while clients are connected would hold their connections open after the clients
  // close them. Started before the clients, it holds none.
  static std::unique_ptr<mock_server> standby(mock_options options);
  // Lets a standby mock start, and waits (10 s at most) for its listening line; throws if it
  // never comes. Nothing for a mock that is already listening.
  void release();

  std::uint16_t port() const { return port_; }
  bool tls() const { return tls_; }
  std::string url() const;  // e.g. http://127.0.0.1:PORT — what a base_url names

  // GET /_stats (the log limited to ids > since when given).
  boost::json::object stats(std::optional<std::uint64_t> since = std::nullopt);
  // Polls /_stats until `done` holds or the timeout passes; returns the last stats either way.
  // The mock sees a client's close asynchronously, so assertions on it wait for it this way.
  boost::json::object wait_for_stats(const std::function<bool(const boost::json::object&)>& done,
                                     std::chrono::milliseconds timeout = std::chrono::seconds(5));
  void reset();
  // What the mock's GET /health answers from now (200 at start; a reset keeps it).
  void set_health(int status);
  // SIGKILL, as a crashing upstream: the kernel closes its connections; no /_stats afterwards.
  // Waits (5 s at most) for the process to be reaped; throws if it is not.
  void kill();

  child_process& process() { return process_; }

 private:
  struct gate {
    temp_dir dir;
    std::string fifo;  // the standby process reads a line from it, then execs tether-mock
    gate();
  };
  mock_server(mock_options options, std::unique_ptr<gate> standby_gate);
  void await_listening();

  std::unique_ptr<gate> gate_;  // before process_: the process reads it while it lives
  child_process process_;
  bool tls_ = false;
  std::uint16_t port_ = 0;
};

// A log entry of a stats object by position (throws if absent).
const boost::json::object& log_entry(const boost::json::object& stats, std::size_t index);

}  // namespace tether::test
