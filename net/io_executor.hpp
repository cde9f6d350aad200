// The executor every connection's handlers run on: its io_context's own, by its concrete type.
// Each context is run by exactly one thread (io_runtime), so one connection's handlers never run
// at once and need no strand; and a concrete type spares every socket operation, handler and
// timer the copies and indirect calls of Asio's type-erased any_io_executor.
// net/-internal: it exposes Asio.
#pragma once

#include <boost/asio/io_context.hpp>

namespace tether::net {

using io_executor = boost::asio::io_context::executor_type;

}  // namespace tether::net
