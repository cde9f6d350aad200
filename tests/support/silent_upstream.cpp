#include "tests/support/silent_upstream.hpp"
#include "tests/support/loopback.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

namespace tether::test {
namespace {

double wall_ms_now() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

silent_upstream::silent_upstream(mode m) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw std::runtime_error("silent_upstream: socket failed");
  auto addr = loopback(0);
  socklen_t len = sizeof addr;
  // Backlog 0 holds exactly one connection that nobody accepted; the kernel then drops SYNs.
  const int backlog = m == mode::never_accepts ? 0 : 64;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, backlog) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(listen_fd_);
    throw std::runtime_error("silent_upstream: cannot listen on 127.0.0.1");
  }
  port_ = ntohs(addr.sin_port);
  if (m == mode::never_accepts) {
    filler_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    auto to = loopback(port_);
    if (filler_fd_ < 0 || ::connect(filler_fd_, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
      if (filler_fd_ >= 0) ::close(filler_fd_);
      ::close(listen_fd_);
      throw std::runtime_error("silent_upstream: cannot fill the backlog");
    }
    filler_pending_ = true;
  } else {
    accepting_ = true;
  }
  thread_ = std::thread([this] { run(); });
}

silent_upstream::~silent_upstream() {
  stop_ = true;
  thread_.join();
  if (filler_fd_ >= 0) ::close(filler_fd_);
  ::close(listen_fd_);
}

void silent_upstream::start_accepting() {
  accepting_ = true;
}

std::vector<silent_connection> silent_upstream::connections() const {
  std::lock_guard lock(mutex_);
  return connections_;
}

bool silent_upstream::wait_for(
    const std::function<bool(const std::vector<silent_connection>&)>& done,
    std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!done(connections())) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

void silent_upstream::run() {
  struct peer {
    int fd;
    std::size_t index;  // into connections_; npos for the filler
  };
  constexpr std::size_t filler = static_cast<std::size_t>(-1);
  std::vector<peer> peers;
  while (!stop_) {
    std::vector<pollfd> fds;
    const bool accepting = accepting_;
    if (accepting) fds.push_back({listen_fd_, POLLIN, 0});
    for (const auto& p : peers) fds.push_back({p.fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 10);
    const double now = wall_ms_now();
    std::size_t at = 0;
    if (accepting) {
      if (fds[0].revents & POLLIN) {
        int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
          if (filler_pending_) {
            // The backlog holds one connection only, so the first one accepted is the filler.
            filler_pending_ = false;
            peers.push_back({fd, filler});
          } else {
            std::lock_guard lock(mutex_);
            connections_.push_back({now, std::nullopt, std::nullopt, 0});
            peers.push_back({fd, connections_.size() - 1});
          }
        }
      }
      at = 1;
    }
    for (std::size_t i = 0; i + at < fds.size(); ++i) {
      if (!(fds[i + at].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buffer[4096];
      auto n = ::recv(peers[i].fd, buffer, sizeof buffer, 0);
      if (peers[i].index == filler) continue;
      std::lock_guard lock(mutex_);
      auto& c = connections_[peers[i].index];
      if (n > 0) {
        if (!c.first_byte_ms) c.first_byte_ms = now;
        c.bytes += static_cast<std::size_t>(n);
      } else if (!c.closed_ms) {
        c.closed_ms = now;
      }
    }
    // A closed peer's socket stays open (still polled, now readable at once) only until its
    // close is recorded: drop it.
    for (auto it = peers.begin(); it != peers.end();) {
      bool closed = false;
      if (it->index != filler) {
        std::lock_guard lock(mutex_);
        closed = connections_[it->index].closed_ms.has_value();
      }
      if (closed) {
        ::close(it->fd);
        it = peers.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const auto& p : peers) ::close(p.fd);
}

}  // namespace tether::test
