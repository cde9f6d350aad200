// A TCP relay on 127.0.0.1 between a peer and a listening port, which the test can cut: a network
// path that, once cut, drops everything in both directions and tells neither end (the sockets stay
// open, nothing is reset), as a partition between two live hosts does; and heal again.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace tether::test {

class tcp_relay {
 public:
  // Listens on an ephemeral loopback port and relays each connection to 127.0.0.1:to. Throws if
  // it cannot listen.
  explicit tcp_relay(std::uint16_t to);
  ~tcp_relay();
  tcp_relay(const tcp_relay&) = delete;
  tcp_relay& operator=(const tcp_relay&) = delete;

  std::uint16_t port() const { return port_; }

  // From now on no byte passes either way on any connection; connections made meanwhile are
  // accepted and held unanswered, as a SYN into a partition is never answered at all.
  void cut();
  // Bytes pass again on the connections that both ends still hold; the connections held while
  // cut are closed (their connects would have timed out); new ones are relayed.
  void heal();

 private:
  struct pipe {
    int near = -1;  // the peer's connection, accepted here
    int far = -1;   // ours to the destination (-1: accepted while cut, not relayed)
  };
  void run();
  void close_pipe(pipe& p);

  std::uint16_t to_;
  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::mutex mutex_;  // cut_ and heal_pending_ change, and bytes pass, under it
  bool cut_ = false;
  bool heal_pending_ = false;
  std::atomic<bool> stop_{false};
  std::vector<pipe> pipes_;  // the relay thread's alone
  std::thread thread_;
};

}  // namespace tether::test
