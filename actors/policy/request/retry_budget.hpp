// The gateway's own retry amplification, bounded per upstream whatever the clients do (Envoy's
// retry budget): a retry may start only while the retries in flight to an upstream stay within
// max(min_concurrency, percent % of the requests in flight to it). Past that, an attempt's
// failure is final for its model. Thread-safe plain counters: request actors on every scheduler
// thread ask it; no actor is involved.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace tether {

class retry_budget {
 public:
  retry_budget(std::size_t upstreams, std::uint32_t min_concurrency, std::uint32_t percent);

  // A reload: the new limits apply to the next retry; the counts in flight stay, and upstreams
  // only ever grow (a removed one keeps its index).
  void reshape(std::size_t upstreams, std::uint32_t min_concurrency, std::uint32_t percent);

  // A request has an attempt on (or is between attempts of) `upstream`, until request_left.
  void request_joined(std::size_t upstream);
  void request_left(std::size_t upstream);

  // Takes a retry token for a retry caused by a failure on `upstream`; false = over budget. The
  // token is held through the backoff and the retry attempt, until retry_ended.
  bool try_start_retry(std::size_t upstream);
  void retry_ended(std::size_t upstream);

  // How many retries may be in flight to `upstream` now.
  std::uint32_t limit(std::size_t upstream) const;
  std::uint32_t retries_in_flight(std::size_t upstream) const;
  std::uint32_t requests_in_flight(std::size_t upstream) const;

 private:
  struct counts {
    std::uint32_t requests = 0;
    std::uint32_t retries = 0;
  };
  std::uint32_t limit_locked(const counts& c) const;

  std::uint32_t min_concurrency_;
  std::uint32_t percent_;
  mutable std::mutex mutex_;
  std::vector<counts> per_upstream_;
};

}  // namespace tether
