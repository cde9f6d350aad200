// A caller that sends one request and then goes away when the test says so: at an event the test
// observed (the upstream has the request, the response head arrived, k SSE events arrived), not
// after a guessed sleep. The response is read on a thread of its own; every wait is bounded.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "tests/support/http_client.hpp"

namespace tether::test {

class leaving_client {
 public:
  // Connects to 127.0.0.1:port and writes the request (POST, JSON body); throws http_error when
  // either fails.
  leaving_client(std::uint16_t port, std::string_view target, std::string_view body,
                 const header_map& headers = {});
  ~leaving_client();  // leaves, if it has not yet
  leaving_client(const leaving_client&) = delete;
  leaving_client& operator=(const leaving_client&) = delete;

  bool wait_head(std::chrono::milliseconds timeout);
  // Waits until k complete SSE events ("...\n\n") of the decoded body have arrived.
  bool wait_events(std::size_t k, std::chrono::milliseconds timeout);
  // Waits until the response is complete or the server closed the connection.
  bool wait_end(std::chrono::milliseconds timeout);

  // Closes the connection (FIN) now, and returns the moment it did.
  test_clock::time_point leave();

  int status() const;  // 0 until the head arrived
  std::string body() const;
  std::size_t events() const;
  bool complete() const;       // the whole response arrived
  bool server_closed() const;  // the server closed (or reset) before we left

 private:
  void read_loop();

  int fd_ = -1;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  int status_ = 0;
  std::string body_;
  std::size_t events_ = 0;
  bool complete_ = false;
  bool server_closed_ = false;
  bool left_ = false;
  std::thread reader_;
};

}  // namespace tether::test
