// Blocking, bounded HTTP calls the bench makes between load phases: the mock's /_stats and
// /_reset, tether's /metrics. Never used while load runs (it would stall the load loop).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include <boost/asio/ip/tcp.hpp>
#include <boost/json/value.hpp>

namespace tether::bench {

struct http_reply {
  unsigned status = 0;
  std::string body;
};

// nullopt on any transport failure or when `timeout` passes.
std::optional<http_reply> http_call(const boost::asio::ip::tcp::endpoint& target,
                                    const std::string& method, const std::string& path,
                                    std::chrono::milliseconds timeout = std::chrono::seconds(10));

class mock_control {
 public:
  explicit mock_control(boost::asio::ip::tcp::endpoint mock) : mock_(mock) {}
  bool reset() const;
  // The mock's /_stats as JSON; throws std::runtime_error if it cannot be read.
  boost::json::value stats() const;
  // The same without the request log (the counters only): cheap after a long load phase.
  boost::json::value counters() const;

 private:
  boost::asio::ip::tcp::endpoint mock_;
};

}  // namespace tether::bench
