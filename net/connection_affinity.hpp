// The executor a caller's connection runs on (its io_context's), handed (opaquely, through the
// actors) to the upstream exchange made for that caller: the exchange then runs on the same
// executor, so that what the caller's connection decides (its deadline passed, the caller left)
// reaches the upstream socket at once, not through a post behind everything else queued.
// net/-internal: it exposes Asio; everyone else holds it by an incomplete type.
#pragma once

#include "net/upstream_connection.hpp"

namespace tether::net {

struct connection_affinity {
  io_executor executor;
};

}  // namespace tether::net
