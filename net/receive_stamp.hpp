// When a request really arrived: the kernel's receive timestamp of its first bytes
// (SO_TIMESTAMPNS), not the moment the io thread got round to reading them. Under a burst the
// two differ by the whole backlog ahead of the request, and the caller's deadline is counted
// from arrival (docs/contract.md).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <optional>

namespace tether::net {

// Asks the kernel to stamp what this socket receives. Best effort: false if it refused.
bool enable_receive_stamps(int fd);

struct stamped_read {
  ssize_t n = -1;  // bytes read, 0 at end of stream, -1 on error (see err)
  int err = 0;     // errno when n < 0 (EAGAIN: nothing to read yet)
  std::optional<std::chrono::system_clock::time_point> stamp;  // when the kernel received them
};

// One non-blocking recvmsg into buf, with the receive timestamp if the kernel gave one.
stamped_read read_stamped(int fd, void* buf, std::size_t len);

// The steady-clock moment a wall-clock stamp stands for, given both clocks read now. A stamp in
// the future (the wall clock stepped back) counts as now; one older than `max_age` (stepped
// forward, or a stamp from long ago) is not trusted, and now is used.
std::chrono::steady_clock::time_point steady_from_stamp(
    std::chrono::system_clock::time_point stamp, std::chrono::steady_clock::time_point steady_now,
    std::chrono::system_clock::time_point system_now,
    std::chrono::steady_clock::duration max_age = std::chrono::seconds(10));

}  // namespace tether::net
