#include "actors/policy/admission/rate_book.hpp"

#include <algorithm>

namespace tether {
namespace {

constexpr std::int64_t ns_per_second = 1'000'000'000;

std::int64_t second_of(std::int64_t now_ns) {
  return now_ns >= 0 ? now_ns / ns_per_second : -((-now_ns + ns_per_second - 1) / ns_per_second);
}

std::size_t place_of(std::int64_t second, std::int64_t window) {
  return static_cast<std::size_t>(((second % window) + window) % window);
}

}  // namespace

rate_book::rate_book(std::vector<limits> per_key) {
  set_limits(std::move(per_key));
}

void rate_book::set_limits(std::vector<limits> per_key) {
  limits_ = std::move(per_key);
  // Keys only grow in number (a removed one keeps its index): their windows are kept.
  if (windows_.size() < limits_.size()) windows_.resize(limits_.size());
}

bool rate_book::limited(std::int64_t key) const {
  if (key < 0 || static_cast<std::size_t>(key) >= limits_.size()) return false;
  const auto& l = limits_[key];
  return l.rpm > 0 || l.tpm > 0;
}

rate_book::key_window* rate_book::window_of(std::int64_t key) {
  if (key < 0 || static_cast<std::size_t>(key) >= windows_.size()) return nullptr;
  return &windows_[key];
}

void rate_book::advance(key_window& w, std::int64_t second) {
  for (auto& b : w.buckets) {
    if (b.second >= 0 && b.second <= second - window_seconds) {
      w.requests -= b.requests;
      w.tokens -= b.tokens;
      b = bucket{};
    }
  }
}

rate_book::verdict rate_book::admit(std::int64_t key, std::uint64_t tokens, std::int64_t now_ns) {
  verdict v;
  auto* w = window_of(key);
  if (w == nullptr || !limited(key)) {
    v.admitted = true;
    v.charged_second = second_of(now_ns);
    return v;
  }
  const auto& l = limits_[key];
  const auto now_s = second_of(now_ns);
  advance(*w, now_s);
  if (l.tpm > 0 && tokens > l.tpm) {
    v.never = true;
    v.reason = "the request's estimated " + std::to_string(tokens) +
               " tokens are more than the key's whole tpm (" + std::to_string(l.tpm) + ")";
    return v;
  }
  const bool requests_fit = l.rpm == 0 || w->requests < l.rpm;
  const bool tokens_fit = l.tpm == 0 || w->tokens <= l.tpm - tokens;
  if (requests_fit && tokens_fit) {
    auto& b = w->buckets[place_of(now_s, window_seconds)];
    if (b.second != now_s) b = bucket{now_s, 0, 0};
    ++b.requests;
    b.tokens += tokens;
    ++w->requests;
    w->tokens += tokens;
    v.admitted = true;
    v.charged_second = now_s;
    return v;
  }
  // The soonest moment the oldest charges have left the window far enough for this one.
  std::vector<const bucket*> oldest_first;
  for (const auto& b : w->buckets)
    if (b.second >= 0) oldest_first.push_back(&b);
  std::sort(oldest_first.begin(), oldest_first.end(),
            [](const bucket* a, const bucket* b) { return a->second < b->second; });
  std::uint64_t requests = w->requests;
  std::uint64_t used = w->tokens;
  std::int64_t fits_at_s = now_s + 1;
  for (const auto* b : oldest_first) {
    if ((l.rpm == 0 || requests < l.rpm) && (l.tpm == 0 || used <= l.tpm - tokens)) break;
    requests -= b->requests;
    used -= b->tokens;
    fits_at_s = b->second + window_seconds;
  }
  v.retry_after_ms =
      std::max<std::int64_t>(1, (fits_at_s * ns_per_second - now_ns + 999'999) / 1'000'000);
  v.reason = requests_fit
                 ? "the key's tpm (" + std::to_string(l.tpm) + " tokens per minute) is used up"
                 : "the key's rpm (" + std::to_string(l.rpm) + " requests per minute) is used up";
  return v;
}

void rate_book::correct(std::int64_t key, std::int64_t charged_second, std::uint64_t estimate,
                        std::uint64_t actual, std::int64_t now_ns) {
  auto* w = window_of(key);
  if (w == nullptr) return;
  advance(*w, second_of(now_ns));
  auto& b = w->buckets[place_of(charged_second, window_seconds)];
  if (b.second != charged_second) return;  // out of the window: it no longer counts
  // Never below zero: a correction of more than the bucket holds must not wrap the sums.
  const auto removed = std::min(estimate, b.tokens);
  b.tokens -= removed;
  w->tokens -= removed;
  b.tokens += actual;
  w->tokens += actual;
}

std::uint64_t rate_book::requests_in_window(std::int64_t key, std::int64_t now_ns) {
  auto* w = window_of(key);
  if (w == nullptr) return 0;
  advance(*w, second_of(now_ns));
  return w->requests;
}

std::uint64_t rate_book::tokens_in_window(std::int64_t key, std::int64_t now_ns) {
  auto* w = window_of(key);
  if (w == nullptr) return 0;
  advance(*w, second_of(now_ns));
  return w->tokens;
}

}  // namespace tether
