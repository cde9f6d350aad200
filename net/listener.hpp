// Accepts connections for one bound address and hands each to a downstream_session, or closes
// it at once when the server is at max_connections. The acceptor runs on the group's first io
// thread; each connection is accepted onto the next member's, in turn, so that every io thread
// serves an equal share of the callers' connections.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/error.hpp>

#include "net/io_executor.hpp"
#include "net/io_group.hpp"

namespace tether::net {

struct server_context;

class listener : public std::enable_shared_from_this<listener> {
 public:
  listener(const io_group& io, std::shared_ptr<server_context> context);

  // Binds and listens (synchronously, before any io thread touches the acceptor); returns the
  // bound port. Throws std::runtime_error naming the address.
  std::uint16_t open(const std::string& host, std::uint16_t port);
  void start();
  // Closes the acceptor. From outside the io threads it returns once the port is closed.
  void stop();

 private:
  void do_accept();
  void on_accept(boost::beast::error_code ec,
                 boost::asio::basic_stream_socket<boost::asio::ip::tcp, io_executor> socket);
  void on_backoff(boost::beast::error_code ec);
  void close();

  io_group group_;
  boost::asio::io_context& io_;  // the acceptor's: group_'s first
  std::size_t next_member_ = 0;  // where the next connection goes
  std::shared_ptr<server_context> context_;
  boost::asio::strand<boost::asio::io_context::executor_type> strand_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer backoff_;
  bool stopped_ = false;
};

}  // namespace tether::net
