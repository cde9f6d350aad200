// An upstream on 127.0.0.1 that never answers, for the phases the mock cannot hold a client in:
// a TLS handshake that stalls (it accepts, reads the ClientHello and says nothing), or a TCP
// connect that stalls (a backlog of 0 filled by one connection of its own, so the kernel drops
// every further SYN until the test lets it accept). It records when each peer came and went.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace tether::test {

struct silent_connection {
  double accepted_ms = 0;               // wall-clock epoch ms, as the mock's stats
  std::optional<double> first_byte_ms;  // the peer's first byte (a ClientHello, a request)
  std::optional<double> closed_ms;      // the peer closed or reset its end
  std::size_t bytes = 0;
};

class silent_upstream {
 public:
  enum class mode {
    never_answers,  // accepts at once, reads, never writes
    never_accepts,  // connects stall in SYN_SENT until start_accepting()
  };

  explicit silent_upstream(mode m);  // throws if no socket can be set up
  ~silent_upstream();
  silent_upstream(const silent_upstream&) = delete;
  silent_upstream& operator=(const silent_upstream&) = delete;

  std::uint16_t port() const { return port_; }

  // never_accepts: takes its own filler connection off the backlog, so a SYN that the kernel
  // retransmits from now on completes, and accepts (as never_answers) from then on.
  void start_accepting();

  // The peers' connections in accept order (the filler excluded).
  std::vector<silent_connection> connections() const;
  // Polls connections() until `done` holds or the timeout passes; true if it held.
  bool wait_for(const std::function<bool(const std::vector<silent_connection>&)>& done,
                std::chrono::milliseconds timeout);

 private:
  void run();

  int listen_fd_ = -1;
  int filler_fd_ = -1;
  std::uint16_t port_ = 0;
  bool filler_pending_ = false;
  std::atomic<bool> accepting_{false};
  std::atomic<bool> stop_{false};
  mutable std::mutex mutex_;
  std::vector<silent_connection> connections_;
  std::thread thread_;
};

}  // namespace tether::test
