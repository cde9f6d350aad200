// The executor a caller's connection runs on (its io_context's), handed (opaquely, through the
// actors) to the upstream exchange made for that caller: the exchange then runs on the caller's
// io thread, where that request's actors run too, so their commands (start, cancel) reach the
// upstream socket at once, not through a post behind everything else queued. The actors decide
// when an exchange ends (the caller left, a retry, the deadline); the one command the socket
// carries out on its own is the deadline, as the request's close_at (net/upstream.hpp).
// net/-internal: it exposes Asio; everyone else holds it by an incomplete type.
#pragma once

#include "net/upstream_connection.hpp"

namespace tether::net {

struct connection_affinity {
  io_executor executor;
};

}  // namespace tether::net
