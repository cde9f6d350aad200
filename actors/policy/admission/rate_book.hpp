// Per-key request and token rates over a sliding minute (contract: "Token-aware admission"):
// `rpm` requests and `tpm` tokens (prompt + completion) per key. The budget keeps one (the budget
// host's counts the whole cluster); a request is admitted, and charged one request and its
// estimated tokens, or refused with the time after which it would fit. When the request ends, the
// estimate is corrected to what the upstream reported it used.
//
// The minute slides in one-second steps: a charge counts for the second it was made in and the
// 59 after it, so the window is exact to under a second and each key's record is 60 buckets, at
// any rate. Pure: time comes in as `now_ns`.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace tether {

class rate_book {
 public:
  struct limits {
    std::uint64_t rpm = 0;  // 0 = unlimited
    std::uint64_t tpm = 0;
    bool operator==(const limits&) const = default;
  };
  struct verdict {
    bool admitted = false;
    // Refused: how long until the request would fit (whole milliseconds, ≥ 1), and why. `never`:
    // its tokens alone are more than the key's whole tpm, so waiting cannot help.
    std::int64_t retry_after_ms = 0;
    bool never = false;
    std::string reason;
    // Admitted: the second its charge was made in, which correct() names.
    std::int64_t charged_second = 0;
  };

  // Keys by index, as the gateway's [[keys]]; a key beyond the list, or -1, is unlimited.
  explicit rate_book(std::vector<limits> per_key = {});
  // A reload: the new limits apply from now on; what was charged stays charged.
  void set_limits(std::vector<limits> per_key);
  bool limited(std::int64_t key) const;

  verdict admit(std::int64_t key, std::uint64_t tokens, std::int64_t now_ns);
  // The request charged `estimate` tokens in `charged_second` used `actual`: that second's
  // count is corrected, if it is still in the window (after it, nothing counts it any more).
  void correct(std::int64_t key, std::int64_t charged_second, std::uint64_t estimate,
               std::uint64_t actual, std::int64_t now_ns);

  std::uint64_t requests_in_window(std::int64_t key, std::int64_t now_ns);
  std::uint64_t tokens_in_window(std::int64_t key, std::int64_t now_ns);

 private:
  static constexpr std::int64_t window_seconds = 60;
  struct bucket {
    std::int64_t second = -1;  // the second it counts; -1 = empty
    std::uint64_t requests = 0;
    std::uint64_t tokens = 0;
  };
  struct key_window {
    std::array<bucket, window_seconds> buckets{};
    std::uint64_t requests = 0;  // the sums over the buckets in the window
    std::uint64_t tokens = 0;
  };

  key_window* window_of(std::int64_t key);
  // Drops the buckets that have left the window at `second`.
  static void advance(key_window& w, std::int64_t second);

  std::vector<limits> limits_;
  std::vector<key_window> windows_;
};

}  // namespace tether
