#include "bench/mock/peer_watch.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <vector>

namespace tether::mock {

void peer_watch::add(const std::shared_ptr<watched_connection>& c) {
  watched_[c.get()] = c;
}

void peer_watch::remove(const watched_connection* c) {
  watched_.erase(c);
}

void peer_watch::settle() {
  if (watched_.empty()) return;
  std::vector<pollfd> fds;
  std::vector<std::shared_ptr<watched_connection>> held;
  fds.reserve(watched_.size());
  held.reserve(watched_.size());
  for (const auto& [key, weak] : watched_) {
    auto c = weak.lock();
    if (!c) continue;
    fds.push_back({c->native_handle(), POLLIN | POLLRDHUP, 0});
    held.push_back(std::move(c));
  }
  if (fds.empty() || ::poll(fds.data(), fds.size(), 0) <= 0) return;
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents != 0 && has_gone(fds[i].fd)) held[i]->peer_gone();
  }
}

bool peer_watch::has_gone(int fd) {
  // Bytes waiting are not an end (a pipelined request); only end of stream or an error is.
  char byte = 0;
  const auto n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace tether::mock
