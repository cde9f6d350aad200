#include "net/notice_outbox.hpp"

#include <chrono>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

namespace tether::net {
namespace {

namespace asio = boost::asio;

struct outbox {
  asio::io_context* context = nullptr;
  // Non-empty exactly while reports are held, and then a flush is always posted.
  std::vector<std::function<void()>> notices;
  // Only notices asking to be held extend the hold: the reports queued behind them (every
  // upstream close under load) must not keep it going until the limit.
  std::size_t held = 0;
  std::size_t held_seen = 0;  // `held` when the flush was last posted
  std::chrono::steady_clock::time_point first_held;
};

thread_local outbox this_thread_outbox;

void post_flush(outbox& box);

void flush() {
  auto& box = this_thread_outbox;
  if (box.held != box.held_seen &&
      std::chrono::steady_clock::now() - box.first_held < notice_hold_limit) {
    post_flush(box);  // this round held more: the thread is not done yet
    return;
  }
  box.held = 0;
  auto notices = std::move(box.notices);
  box.notices.clear();  // a notice below that posts another starts a new hold
  for (auto& notice : notices) {
    // One that throws must not lose the others: each may be the report a budget slot waits for.
    try {
      notice();
    } catch (...) {
    }
  }
}

void post_flush(outbox& box) {
  box.held_seen = box.held;
  asio::post(*box.context, flush);
}

}  // namespace

void defer_behind_queued(std::function<void()> work) {
  auto& box = this_thread_outbox;
  if (box.context == nullptr) {
    work();
    return;
  }
  asio::post(*box.context, std::move(work));
}

namespace detail {

bool queues(notice_timing timing) noexcept {
  const auto& box = this_thread_outbox;
  return box.context != nullptr &&
         (timing == notice_timing::when_caught_up || !box.notices.empty());
}

void queue_notice(std::function<void()> notice, notice_timing timing) {
  auto& box = this_thread_outbox;
  const bool first = box.notices.empty();
  box.notices.push_back(std::move(notice));
  if (timing == notice_timing::when_caught_up) ++box.held;
  if (first) {
    box.first_held = std::chrono::steady_clock::now();
    post_flush(box);
  }
}

void bind_notice_outbox(void* context) {
  this_thread_outbox.context = static_cast<asio::io_context*>(context);
}
}  // namespace detail

}  // namespace tether::net
