#include "net/timer_service.hpp"

#include <boost/asio/io_context.hpp>

#include "net/io_runtime.hpp"
#include "net/timer_heap.hpp"

namespace tether::net {
namespace asio = boost::asio;

struct timer_service::impl {
  asio::io_context* ctx;
};

timer_service::timer_service(io_runtime& io)
    : impl_(std::make_unique<impl>(impl{static_cast<asio::io_context*>(io.native())})) {}

timer_service::~timer_service() = default;

std::shared_ptr<timer> timer_service::start(std::chrono::nanoseconds delay, timer_callback fire) {
  return timer_heap::of(*impl_->ctx)
      .start(std::chrono::steady_clock::now() + delay, std::move(fire));
}

}  // namespace tether::net
