#include "net/timer_service.hpp"

#include <boost/asio/io_context.hpp>

#include "net/io_runtime.hpp"
#include "net/timer_heap.hpp"

namespace tether::net {
namespace asio = boost::asio;

namespace {

class io_timer_service final : public timer_service {
 public:
  // The heap is looked up once: Asio's service lookup takes the io_context's mutex every time.
  explicit io_timer_service(io_runtime& io)
      : heap_(&timer_heap::of(*static_cast<asio::io_context*>(io.native()))) {}

  std::shared_ptr<timer> start(std::chrono::nanoseconds delay, timer_callback fire) override {
    return heap_->start(std::chrono::steady_clock::now() + delay, std::move(fire));
  }

 private:
  timer_heap* heap_;
};

}  // namespace

std::unique_ptr<timer_service> make_io_timer_service(io_runtime& io) {
  return std::make_unique<io_timer_service>(io);
}

}  // namespace tether::net
