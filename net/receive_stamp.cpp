#include "net/receive_stamp.hpp"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <ctime>

namespace tether::net {

bool enable_receive_stamps(int fd) {
  const int on = 1;
  return ::setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on) == 0;
}

stamped_read read_stamped(int fd, void* buf, std::size_t len) {
  iovec iov{buf, len};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(timespec))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  stamped_read result;
  result.n = ::recvmsg(fd, &msg, MSG_DONTWAIT);
  if (result.n < 0) {
    result.err = errno;
    return result;
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_TIMESTAMPNS) continue;
    timespec ts{};
    std::memcpy(&ts, CMSG_DATA(c), sizeof ts);
    if (ts.tv_sec == 0 && ts.tv_nsec == 0) continue;
    result.stamp = std::chrono::system_clock::time_point{
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec))};
  }
  return result;
}

std::chrono::steady_clock::time_point steady_from_stamp(
    std::chrono::system_clock::time_point stamp, std::chrono::steady_clock::time_point steady_now,
    std::chrono::system_clock::time_point system_now, std::chrono::steady_clock::duration max_age) {
  const auto age =
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(system_now - stamp);
  if (age <= std::chrono::steady_clock::duration::zero() || age > max_age) return steady_now;
  return steady_now - age;
}

}  // namespace tether::net
