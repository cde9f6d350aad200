#include "net/timer_service.hpp"

#include <boost/asio/io_context.hpp>
#include <vector>

#include "net/io_group.hpp"
#include "net/io_runtime.hpp"
#include "net/timer_heap.hpp"

namespace tether::net {
namespace asio = boost::asio;

namespace {

// A timer goes on the heap of the io thread that arms it, so that it fires on the thread its
// actor runs on.
class io_timer_service final : public timer_service {
 public:
  // The heaps are looked up once: Asio's service lookup takes the io_context's mutex every time.
  explicit io_timer_service(const io_group& io) : io_(io) {
    for (std::size_t i = 0; i < io.size(); ++i) {
      heaps_.push_back(&timer_heap::of(*static_cast<asio::io_context*>(io.at(i).native())));
    }
  }

  std::shared_ptr<timer> start(std::chrono::nanoseconds delay, timer_callback fire) override {
    return heaps_[io_.here()]->start(std::chrono::steady_clock::now() + delay, std::move(fire));
  }

 private:
  io_group io_;
  std::vector<timer_heap*> heaps_;  // by member of io_
};

}  // namespace

std::unique_ptr<timer_service> make_io_timer_service(const io_group& io) {
  return std::make_unique<io_timer_service>(io);
}

}  // namespace tether::net
