#include <memory>
#include <utility>

#include "net/connection_affinity.hpp"
#include "net/io_runtime.hpp"
#include "net/upstream.hpp"
#include "net/upstream_session.hpp"

namespace tether::net {

struct upstream_client::impl {
  std::shared_ptr<upstream_origin> origin;
};

upstream_client::upstream_client(io_runtime& io, upstream_endpoint endpoint)
    : impl_(std::make_shared<impl>()) {
  auto& context = *static_cast<asio::io_context*>(io.native());
  impl_->origin = std::make_shared<upstream_origin>(context, std::move(endpoint));
}

upstream_client::~upstream_client() {
  // Running exchanges keep the origin alive and finish; what would park closes instead.
  impl_->origin->pool->shut();
}

std::shared_ptr<upstream_exchange> upstream_client::start(
    upstream_request request, std::shared_ptr<upstream_events> events,
    std::shared_ptr<const connection_affinity> affinity) {
  auto session = std::make_shared<upstream_session>(impl_->origin, impl_->origin->pool->take(),
                                                    std::move(request), std::move(events),
                                                    std::move(affinity));
  session->run();
  return session;
}

void upstream_client::retire() {
  impl_->origin->pool->shut();
}

std::size_t upstream_client::idle_connections() const {
  return impl_->origin->pool->size();
}

}  // namespace tether::net
