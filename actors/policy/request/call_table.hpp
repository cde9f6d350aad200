// The recent unsuccessful calls, so that a client's retry of one keeps the call's first deadline
// and what is left of its attempts (docs/contract.md, "One call, one budget"). An entry is a
// call's id (call_identity.hpp: a fingerprint of its caller, surface, model, identity and body,
// never the body), the moment the call's deadline passes, how many tries it had, the upstream
// attempts they spent and how the last one ended, and when its window ends. A try that ends `ok`
// ends the call and forgets it; any other end keeps it for `call_window_ms`.
//
// One table per process, shared by every io thread and config generation: a client's retry
// comes on a connection of its own as often as not, and connections are spread over the io
// threads, so a table per thread would miss it. The lock is held for a map lookup, and only by
// requests that carry a call identity. Bounded: past its capacity the entry whose last try
// ended longest ago goes, counted as an eviction if its window was still open.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "actors/policy/request/deadline.hpp"
#include "actors/policy/request/outcome.hpp"

namespace tether {

class call_table {
 public:
  explicit call_table(std::size_t capacity) : capacity_(capacity) {}

  struct verdict {
    // 1: a new call; n: the call's n-th try.
    std::uint32_t try_number = 1;
    // A retry of a call with a deadline: the moment it passes, the first try's. nullopt: a new
    // call, or a call without a deadline.
    std::optional<steady_time> due;
    // The upstream attempts the call's earlier tries spent together, and how the last of them
    // ended (nullopt for a new call).
    std::uint32_t attempts = 0;
    std::optional<outcome> last;
    bool retry() const { return try_number > 1; }
    // The call's outcome when its earlier tries spent every attempt it may have (max_retries + 1)
    // and the upstream gave the last answer (failed, timed out, rate limited): the retry gets that
    // answer at once. nullopt when attempts are left, or the last try ended otherwise (its caller
    // left, the gateway was full or draining, the upstream rejected the body): the upstream never
    // said no to it, so the retry still makes at least one attempt.
    std::optional<outcome> spent(std::uint32_t max_retries) const;
  };

  // A try of `id` arriving at `now`: a retry when the table holds the call and its window (from
  // the end of its last try) is still open. An entry whose window closed is dropped.
  verdict admit(std::uint64_t id, steady_time now);

  // A try of `id` (its number, from admit) ended at `now`. `ok` ends the call. Otherwise the call
  // is kept until `now + window` with the deadline moment `due` (the try's own: the first try's
  // or earlier; nullopt: unbounded), the `attempts` the try made at an upstream added to the
  // call's, and the try's outcome `how` as the call's last. A window of 0 keeps nothing. Returns
  // the evictions it made.
  std::uint64_t ended(std::uint64_t id, bool ok, std::optional<steady_time> due,
                      std::uint32_t try_number, steady_time now, millis window,
                      std::uint32_t attempts = 0, std::optional<outcome> how = {});

  // A reload's new call_table_max: the entries ended longest ago go at once if it shrank (not
  // counted as evictions: the operator asked for it).
  void set_capacity(std::size_t capacity);
  std::size_t size() const;
  std::uint64_t evictions() const;

 private:
  struct entry {
    std::uint64_t id = 0;
    std::optional<steady_time> due;
    std::uint32_t tries = 0;
    std::uint32_t attempts = 0;
    std::optional<outcome> last;
    steady_time window_end{};
  };
  using order = std::list<entry>;  // the last try's end, oldest first

  void trim(steady_time now, bool count);  // mutex_ held

  mutable std::mutex mutex_;
  std::size_t capacity_;
  order order_;
  std::unordered_map<std::uint64_t, order::iterator> by_id_;
  std::uint64_t evictions_ = 0;
};

}  // namespace tether
