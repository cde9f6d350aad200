#include "net/connection_executor.hpp"

#include <boost/asio/execution_context.hpp>
#include <boost/asio/strand.hpp>

namespace tether::net {
namespace {

namespace asio = boost::asio;

// Its presence in a context's service registry is the mark.
class one_thread_mark final : public asio::execution_context::service {
 public:
  using key_type = one_thread_mark;
  static inline asio::execution_context::id id;
  explicit one_thread_mark(asio::execution_context& context)
      : asio::execution_context::service(context) {}

 private:
  void shutdown() override {}
};

}  // namespace

void mark_one_thread(asio::io_context& io) {
  asio::use_service<one_thread_mark>(io);
}

asio::any_io_executor connection_executor(asio::io_context& io) {
  if (asio::has_service<one_thread_mark>(io)) return io.get_executor();
  return asio::make_strand(io);
}

}  // namespace tether::net
