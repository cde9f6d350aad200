// A loopback port held by a listening socket of this process for as long as the object lives:
// a port "in use" for a child that tries to listen on it, or, once released, a free one.
#pragma once

#include <cstdint>

namespace tether::test {

class taken_port {
 public:
  taken_port();  // throws if no socket can be bound
  ~taken_port();
  taken_port(const taken_port&) = delete;
  taken_port& operator=(const taken_port&) = delete;

  std::uint16_t port() const { return port_; }

 private:
  int fd_;
  std::uint16_t port_ = 0;
};

// A port no socket holds right now (taken, then released).
std::uint16_t free_port();

}  // namespace tether::test
