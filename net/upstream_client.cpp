#include <memory>
#include <utility>

#include "net/connection_affinity.hpp"
#include "net/io_group.hpp"
#include "net/io_runtime.hpp"
#include "net/upstream.hpp"
#include "net/upstream_session.hpp"

namespace tether::net {

// One origin (pool, timers) per io thread: an exchange runs on its caller's thread, with that
// thread's idle connections, and a connection never moves between threads.
struct upstream_client::impl {
  explicit impl(const io_group& io) : group(io) {}

  const std::shared_ptr<upstream_origin>& origin_for(const connection_affinity* affinity) const {
    if (affinity != nullptr) {
      const auto* context = &affinity->executor.context();
      for (const auto& origin : origins) {
        if (static_cast<asio::execution_context*>(&origin->io) == context) return origin;
      }
    }
    return origins[group.here()];
  }

  io_group group;
  std::vector<std::shared_ptr<upstream_origin>> origins;  // by member of `group`
};

upstream_client::upstream_client(const io_group& io, upstream_endpoint endpoint)
    : impl_(std::make_shared<impl>(io)) {
  for (std::size_t i = 0; i < io.size(); ++i) {
    auto& context = *static_cast<asio::io_context*>(io.at(i).native());
    impl_->origins.push_back(std::make_shared<upstream_origin>(context, endpoint));
  }
}

upstream_client::~upstream_client() {
  // Running exchanges keep their origin alive and finish; what would park closes instead.
  for (const auto& origin : impl_->origins) origin->pool->shut();
}

std::shared_ptr<upstream_exchange> upstream_client::start(
    upstream_request request, std::shared_ptr<upstream_events> events,
    std::shared_ptr<const connection_affinity> affinity) {
  const auto& origin = impl_->origin_for(affinity.get());
  auto pooled = request.fresh_connection ? nullptr : origin->pool->take();
  auto session = std::make_shared<upstream_session>(origin, std::move(pooled), std::move(request),
                                                    std::move(events), std::move(affinity));
  session->run();
  return session;
}

void upstream_client::retire() {
  for (const auto& origin : impl_->origins) origin->pool->shut();
}

std::size_t upstream_client::idle_connections() const {
  std::size_t idle = 0;
  for (const auto& origin : impl_->origins) idle += origin->pool->size();
  return idle;
}

}  // namespace tether::net
