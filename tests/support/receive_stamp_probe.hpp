// A connected TCP pair on 127.0.0.1, and a wait until the kernel stamps received packets. Linux
// turns stamping on when the first socket asks for it, through a work queue: packets that arrive
// before that work ran carry no stamp. A test that expects a stamp first probes a loopback pair
// until one comes back stamped. Header-only: for tests that link tether_net.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include "net/receive_stamp.hpp"

namespace tether::test {

// `server` is the accepted end; `ok` says whether both ends exist.
struct loopback_pair {
  loopback_pair() {
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    socklen_t size = sizeof address;
    ok = ::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
         ::listen(listener, 1) == 0 &&
         ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &size) == 0;
    client = ::socket(AF_INET, SOCK_STREAM, 0);
    ok = ok && ::connect(client, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
    server = ok ? ::accept(listener, nullptr, nullptr) : -1;
    ok = ok && server >= 0;
    ::close(listener);
  }
  ~loopback_pair() {
    if (client >= 0) ::close(client);
    if (server >= 0) ::close(server);
  }
  loopback_pair(const loopback_pair&) = delete;
  loopback_pair& operator=(const loopback_pair&) = delete;

  bool readable(std::chrono::milliseconds timeout) const {
    pollfd p{server, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(timeout.count())) == 1;
  }

  bool ok = false;
  int client = -1;
  int server = -1;
};

inline bool await_receive_stamps(std::chrono::milliseconds timeout) {
  loopback_pair pair;
  if (!pair.ok || !net::enable_receive_stamps(pair.server)) return false;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::send(pair.client, "x", 1, 0) != 1 || !pair.readable(std::chrono::milliseconds(1000)))
      return false;
    char byte = 0;
    const auto read = net::read_stamped(pair.server, &byte, 1);
    if (read.n != 1) return false;
    if (read.stamp) return true;
  }
  return false;
}

}  // namespace tether::test
