#include "tests/support/tcp_relay.hpp"
#include "tests/support/loopback.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>

namespace tether::test {
namespace {

// Writes all of `n` bytes; false when the other end is gone.
bool send_all(int fd, const char* data, ssize_t n) {
  while (n > 0) {
    const auto sent = ::send(fd, data, static_cast<std::size_t>(n), MSG_NOSIGNAL);
    if (sent <= 0) return false;
    data += sent;
    n -= sent;
  }
  return true;
}

}  // namespace

tcp_relay::tcp_relay(std::uint16_t to) : to_(to) {
  // Close-on-exec: a gateway started later must not inherit (and so hold open) these sockets.
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw std::runtime_error("tcp_relay: socket failed");
  auto addr = loopback(0);
  socklen_t len = sizeof addr;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, 64) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(listen_fd_);
    throw std::runtime_error("tcp_relay: cannot listen on 127.0.0.1");
  }
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { run(); });
}

tcp_relay::~tcp_relay() {
  stop_ = true;
  thread_.join();
  for (auto& p : pipes_) close_pipe(p);
  ::close(listen_fd_);
}

// Under the lock the relay thread forwards under: once cut() has returned, no byte passes.
void tcp_relay::cut() {
  std::lock_guard lock(mutex_);
  cut_ = true;
}

void tcp_relay::heal() {
  std::lock_guard lock(mutex_);
  heal_pending_ = true;
  cut_ = false;
}

void tcp_relay::close_pipe(pipe& p) {
  if (p.near >= 0) ::close(p.near);
  if (p.far >= 0) ::close(p.far);
  p.near = p.far = -1;
}

// One thread, polling in short steps so that heal() takes effect within one.
void tcp_relay::run() {
  char buf[16384];
  while (!stop_) {
    std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
    bool was_cut = false;
    {
      std::lock_guard lock(mutex_);
      was_cut = cut_;
      if (heal_pending_) {
        heal_pending_ = false;
        for (auto& p : pipes_) {
          if (p.far < 0) close_pipe(p);
        }
      }
    }
    // While cut nothing is read: what either end sends waits, undelivered, in the socket buffers.
    if (!was_cut) {
      for (const auto& p : pipes_) {
        if (p.far < 0) continue;
        fds.push_back({p.near, POLLIN, 0});
        fds.push_back({p.far, POLLIN, 0});
      }
    }
    if (::poll(fds.data(), fds.size(), 10) <= 0) continue;
    std::lock_guard lock(mutex_);
    const bool cut = cut_;
    if (fds[0].revents & POLLIN) {
      pipe p;
      p.near = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (p.near >= 0 && !cut) {
        p.far = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        auto to = loopback(to_);
        if (p.far < 0 || ::connect(p.far, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
          close_pipe(p);
        }
      }
      if (p.near >= 0) pipes_.push_back(p);
    }
    // Polled before a cut, read after it: left unread.
    for (std::size_t i = 1; i < fds.size() && !cut; ++i) {
      if (fds[i].revents == 0) continue;
      for (auto& p : pipes_) {
        if (p.near != fds[i].fd && p.far != fds[i].fd) continue;
        const int from = fds[i].fd;
        const int into = from == p.near ? p.far : p.near;
        const auto n = ::recv(from, buf, sizeof buf, 0);
        // One end closed (or failed): the relay closes the other, as a path that carries a FIN.
        if (n <= 0 || !send_all(into, buf, n)) close_pipe(p);
        break;
      }
    }
    std::erase_if(pipes_, [](const pipe& p) { return p.near < 0; });
  }
}

}  // namespace tether::test
