#include "net/timer_service.hpp"

#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "net/io_runtime.hpp"

namespace tether::net {
namespace asio = boost::asio;

namespace {

class asio_timer final : public timer, public std::enable_shared_from_this<asio_timer> {
 public:
  asio_timer(asio::io_context& ctx, std::function<void()> fire)
      : strand_(asio::make_strand(ctx)), timer_(strand_), fire_(std::move(fire)) {}

  asio::strand<asio::io_context::executor_type> executor() const { return strand_; }

  void arm(std::chrono::steady_clock::time_point when) {
    if (cancelled_.load()) {
      fire_ = nullptr;
      return;
    }
    timer_.expires_at(when);
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->cancelled_.exchange(true)) return;
      auto fire = std::move(self->fire_);
      fire();
    });
  }

  void cancel() override {
    if (cancelled_.exchange(true)) return;
    // The timer object is only touched on its strand; the callback (and what it captured) is
    // released when the aborted wait completes there.
    asio::post(strand_, [self = shared_from_this()] {
      self->timer_.cancel();
      self->fire_ = nullptr;
    });
  }

 private:
  asio::strand<asio::io_context::executor_type> strand_;
  asio::steady_timer timer_;
  std::function<void()> fire_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace

struct timer_service::impl {
  asio::io_context* ctx;
};

timer_service::timer_service(io_runtime& io)
    : impl_(std::make_unique<impl>(impl{static_cast<asio::io_context*>(io.native())})) {}

timer_service::~timer_service() = default;

std::shared_ptr<timer> timer_service::start(std::chrono::nanoseconds delay,
                                            std::function<void()> fire) {
  return start_at(std::chrono::steady_clock::now() + delay, std::move(fire));
}

std::shared_ptr<timer> timer_service::start_at(std::chrono::steady_clock::time_point when,
                                               std::function<void()> fire) {
  auto t = std::make_shared<asio_timer>(*impl_->ctx, std::move(fire));
  // Arming happens on the strand too, so it never races a cancel.
  asio::post(t->executor(), [t, when] { t->arm(when); });
  return t;
}

}  // namespace tether::net
