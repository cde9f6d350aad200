#include "tests/support/rss_sampler.hpp"

#include <fstream>
#include <sstream>
#include <string>

namespace tether::test {

std::optional<std::uint64_t> vm_rss_kib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    std::uint64_t kib = 0;
    if (fields >> kib) return kib;
    return std::nullopt;
  }
  return std::nullopt;
}

rss_sampler::rss_sampler(pid_t pid, std::chrono::milliseconds interval)
    : pid_(pid), interval_(interval) {
  sample();
  thread_ = std::thread([this] {
    while (!stopping_.load()) {
      std::this_thread::sleep_for(interval_);
      sample();
    }
  });
}

rss_sampler::~rss_sampler() {
  stop();
}

void rss_sampler::stop() {
  if (!thread_.joinable()) return;
  stopping_ = true;
  thread_.join();
  sample();
}

void rss_sampler::sample() {
  auto kib = vm_rss_kib(pid_);
  if (!kib) return;
  last_kib_ = *kib;
  if (*kib > peak_kib_.load()) peak_kib_ = *kib;
  ++samples_;
}

}  // namespace tether::test
