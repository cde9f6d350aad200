// The executor a connection's handlers run on: the io_context's own when exactly one thread runs
// it, else a strand of the connection's own. A strand only serialises handlers that several
// threads could run at once; on one thread it is a lock, a queue and a second dispatch per
// operation for nothing. net/-internal: it exposes Asio.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>

namespace tether::net {

// Called by io_runtime for a context that only one thread will run (one thread of its own, or
// the thread lent to it).
void mark_one_thread(boost::asio::io_context& io);

boost::asio::any_io_executor connection_executor(boost::asio::io_context& io);

}  // namespace tether::net
