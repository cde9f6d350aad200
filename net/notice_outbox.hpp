// Reports an io thread owes the actors about work it has already done — a passed deadline's 504
// written, an upstream socket closed — sent once the thread has finished what callers are
// waiting for, instead of one by one in between.
//
// Why: at a deadline storm (hundreds of requests expiring within a millisecond) every report
// woke a CAF worker that shares the io thread's CPU, and the teardown it started (≈60k
// instructions a request: the tree's exits, the budget, the access line) took turns with the
// answers still to be written. The reports carry their own timestamps, so holding them back
// changes no figure; it delays only the bookkeeping (a budget slot is freed by a bounded
// moment later, never earlier).
#pragma once

#include <chrono>
#include <functional>
#include <utility>

namespace tether::net {

enum class notice_timing {
  // Sent at once — unless this thread is holding reports back, then after them, in order.
  now_unless_holding,
  // Held, with every report queued after it, while the io thread keeps finding more of these
  // to send: sent after the first of its rounds (a batch of the reactor's events and their
  // handlers) that adds none of these (reports queued behind them do not count), or
  // notice_hold_limit after the first was held.
  when_caught_up,
};

// How long held reports may wait for the io thread to catch up: a storm of 200 expiries takes
// the io thread ≈4 ms; past this the bookkeeping goes ahead anyway.
inline constexpr std::chrono::milliseconds notice_hold_limit{10};

namespace detail {
// true: `timing` asks to queue on this thread's outbox (an io thread holding, or asked to hold).
bool queues(notice_timing timing) noexcept;
void queue_notice(std::function<void()> notice, notice_timing timing);
// Called by io_runtime on each of its threads before running the io_context (net-internal:
// `context` is the boost::asio::io_context).
void bind_notice_outbox(void* context);
}  // namespace detail

// Runs `work` on the calling io thread behind the handlers already queued there — the other
// timers due in the same round of the reactor — or at once off the io threads (and on those of
// an io_runtime with more than one thread).
void defer_behind_queued(std::function<void()> work);

// Runs `notice` now, or queues it on the calling io thread's outbox. Off the io threads (and on
// those of an io_runtime with more than one thread) it runs at once.
template <class F>
void post_notice(F&& notice, notice_timing timing) {
  if (detail::queues(timing)) {
    detail::queue_notice(std::forward<F>(notice), timing);
  } else {
    notice();
  }
}

}  // namespace tether::net
