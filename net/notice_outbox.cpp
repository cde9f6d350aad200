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
  std::vector<std::function<void()>> notices;
  bool flush_posted = false;
  bool holding = false;
  std::size_t seen = 0;  // notices queued when the flush was last posted
  std::chrono::steady_clock::time_point first_held;
};

thread_local outbox this_thread_outbox;

void post_flush(outbox& box);

void flush() {
  auto& box = this_thread_outbox;
  if (box.notices.size() != box.seen &&
      std::chrono::steady_clock::now() - box.first_held < notice_hold_limit) {
    post_flush(box);  // this round added reports: the thread is not done yet
    return;
  }
  box.flush_posted = false;
  box.holding = false;
  auto notices = std::move(box.notices);
  box.notices.clear();
  for (auto& notice : notices) {
    // One that throws must not lose the others: each may be the report a budget slot waits for.
    try {
      notice();
    } catch (...) {
    }
  }
}

void post_flush(outbox& box) {
  box.flush_posted = true;
  box.seen = box.notices.size();
  asio::post(*box.context, flush);
}

}  // namespace

namespace detail {

bool queues(notice_timing timing) noexcept {
  const auto& box = this_thread_outbox;
  return box.context != nullptr && (timing == notice_timing::when_caught_up || box.holding);
}

void queue_notice(std::function<void()> notice) {
  auto& box = this_thread_outbox;
  box.notices.push_back(std::move(notice));
  if (!box.holding) {
    box.holding = true;
    box.first_held = std::chrono::steady_clock::now();
  }
  if (!box.flush_posted) post_flush(box);
}

void bind_notice_outbox(void* context) {
  this_thread_outbox.context = static_cast<asio::io_context*>(context);
}
}  // namespace detail

}  // namespace tether::net
