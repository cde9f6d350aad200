// A process's resident set size (VmRSS from /proc/<pid>/status), read once or sampled on a
// background thread for as long as the sampler lives.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <thread>

namespace tether::test {

// VmRSS in KiB; nullopt when the process (or the field) is gone.
std::optional<std::uint64_t> vm_rss_kib(pid_t pid);

class rss_sampler {
 public:
  rss_sampler(pid_t pid, std::chrono::milliseconds interval);
  ~rss_sampler();
  rss_sampler(const rss_sampler&) = delete;
  rss_sampler& operator=(const rss_sampler&) = delete;

  // Takes a last sample and ends the thread; the figures below stay readable.
  void stop();
  std::uint64_t peak_kib() const { return peak_kib_.load(); }
  std::uint64_t last_kib() const { return last_kib_.load(); }
  std::uint64_t samples() const { return samples_.load(); }

 private:
  void sample();

  pid_t pid_;
  std::chrono::milliseconds interval_;
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> peak_kib_{0};
  std::atomic<std::uint64_t> last_kib_{0};
  std::atomic<std::uint64_t> samples_{0};
  std::thread thread_;
};

}  // namespace tether::test
