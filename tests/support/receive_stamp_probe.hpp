// Waits until the kernel stamps received packets. Linux turns stamping on when the first socket
// asks for it, through a work queue: packets that arrive before that work ran carry no stamp.
// A test that expects a stamp first probes a loopback pair until one comes back stamped.
// Header-only: for tests that link tether_net.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include "net/receive_stamp.hpp"

namespace tether::test {

inline bool await_receive_stamps(std::chrono::milliseconds timeout) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  socklen_t size = sizeof address;
  bool ok = ::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
            ::listen(listener, 1) == 0 &&
            ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &size) == 0;
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  ok = ok && ::connect(client, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  const int server = ok ? ::accept(listener, nullptr, nullptr) : -1;
  ::close(listener);
  bool stamped = false;
  if (server >= 0 && net::enable_receive_stamps(server)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!stamped && std::chrono::steady_clock::now() < deadline) {
      if (::send(client, "x", 1, 0) != 1) break;
      pollfd p{server, POLLIN, 0};
      if (::poll(&p, 1, 1000) != 1) break;
      char byte = 0;
      const auto read = net::read_stamped(server, &byte, 1);
      if (read.n != 1) break;
      stamped = read.stamp.has_value();
    }
  }
  if (server >= 0) ::close(server);
  ::close(client);
  return stamped;
}

}  // namespace tether::test
