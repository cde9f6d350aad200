// One socket towards an upstream, plain or TLS, with the read buffer that belongs to it. It moves
// between an upstream_session (while an exchange uses it) and the upstream_pool (while idle).
#pragma once

#include <linux/sockios.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <cerrno>
#include <chrono>
#include <utility>
#include <variant>

#include "net/io_executor.hpp"

namespace tether::net {

namespace asio = boost::asio;
namespace beast = boost::beast;

// Every handler of a connection runs on its io_context's one thread (io_executor.hpp), so socket
// and session never race, whichever exchange uses the connection.
using upstream_tcp_stream = beast::basic_stream<asio::ip::tcp, io_executor>;
using upstream_tls_stream = beast::ssl_stream<upstream_tcp_stream>;

class upstream_connection {
 public:
  explicit upstream_connection(io_executor executor)
      : stream_(std::in_place_type<upstream_tcp_stream>, std::move(executor)) {}
  upstream_connection(io_executor executor, asio::ssl::context& tls)
      : stream_(std::in_place_type<upstream_tls_stream>, std::move(executor), tls) {}

  bool tls() const { return std::holds_alternative<upstream_tls_stream>(stream_); }
  upstream_tls_stream& tls_stream() { return std::get<upstream_tls_stream>(stream_); }

  upstream_tcp_stream& tcp() {
    if (auto* s = std::get_if<upstream_tls_stream>(&stream_)) return s->next_layer();
    return std::get<upstream_tcp_stream>(stream_);
  }

  io_executor executor() { return tcp().get_executor(); }

  // The stream the HTTP layer reads and writes: the TLS stream or the bare TCP stream.
  template <class F>
  decltype(auto) visit(F&& f) {
    return std::visit(std::forward<F>(f), stream_);
  }

  beast::flat_buffer& buffer() { return buffer_; }
  // Where the response body is decoded into, one read at a time. It lives with the connection,
  // not with each exchange: an exchange on a pooled connection then allocates only a little
  // (glibc took the large chunk through its bins and consolidated on free).
  std::array<char, 16 * 1024>& body_buffer() { return body_buffer_; }

  // Closes the socket at once. TLS too: a close_notify exchange would be one more round trip the
  // caller has to wait for, and an upstream we give up on is owed nothing. The shutdown sends the
  // FIN first, so the upstream reads an orderly end even when the zero linger of arm_reset() then
  // ends the connection with a reset (which spares this host a TIME_WAIT entry).
  void close() {
    if (reset_sent_) return;  // the descriptor goes with this object
    boost::system::error_code ignored;
    tcp().socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    tcp().socket().close(ignored);
  }

  // Closes with a reset, for work given up on (a cancel, the deadline): the upstream learns at
  // once, as from a close, but one packet replaces the FIN/ACK exchange, and no TIME_WAIT entry
  // per cancelled request piles up on this host (thousands under a cancellation storm).
  void abort() {
    if (reset_sent_) return;  // the descriptor goes with this object
    boost::system::error_code ignored;
    if (!reset_armed_) tcp().socket().set_option(asio::socket_base::linger(true, 0), ignored);
    tcp().socket().close(ignored);
  }

  // The reset alone, now: the upstream learns as from abort(), and the pending operations end
  // (aborted), but the descriptor, its epoll entry and the socket are released only with this
  // object, at the end of the exchange's owner. A deadline storm's resets then go out at the
  // deadline, each one packet, and the heavier close waits with the teardowns behind the 504s.
  // (A connect with AF_UNSPEC is TCP's disconnect: a reset for a connection, an end for a
  // connect still under way.)
  void reset_now() {
    if (reset_sent_ || !is_open()) return;
    sockaddr unspecified{};
    unspecified.sa_family = AF_UNSPEC;
    ::connect(tcp().socket().native_handle(), &unspecified, sizeof unspecified);
    boost::system::error_code ignored;
    tcp().socket().cancel(ignored);
    reset_sent_ = true;
  }
  // Whether reset_now() has ended the connection: it is never used again, nor closed before its
  // owner lets it go.
  bool reset_sent() const { return reset_sent_; }

  // Called once connected: the zero linger that makes a close a reset is set now, once per
  // connection, so that abort() is a single close() when a deadline stops many exchanges at
  // once.
  void arm_reset() {
    boost::system::error_code ec;
    tcp().socket().set_option(asio::socket_base::linger(true, 0), ec);
    reset_armed_ = !ec;
  }

  bool is_open() { return tcp().socket().is_open(); }

  // Whether an idle connection can carry a new request: open, and nothing is waiting to be read
  // on it. An upstream that closed it (its own keep-alive timeout) has left a FIN or a reset;
  // stray bytes (a TLS alert, a late response) make it unusable too. Checked before reuse so that
  // a request is never sent into a connection already known dead: a send that then fails is a
  // real attempt, and no request is re-sent behind the retry policy's back.
  bool reusable() {
    if (!is_open()) return false;
    char byte = 0;
    const auto n = ::recv(tcp().socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }

  // After the connection ended before any byte of the answer: whether the upstream had closed
  // it before it could read the request. Either it reset the connection after its own FIN (a
  // reset in CLOSE_WAIT, which the kernel reports as EPIPE): TCP's answer to data that arrived
  // after the close or was left unread by it; or its FIN, with no reset, did not acknowledge the
  // whole request: it closed before the request reached it. A peer that read the request and
  // then closed (a FIN alone, acknowledging it) or aborted (a reset alone, whose acknowledgement
  // the kernel does not take) may have acted on it: no. Only on a failure, never on the plain
  // path.
  bool closed_before_request() {
    const int fd = tcp().socket().native_handle();
    int error = 0;
    socklen_t size = sizeof error;
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) == 0 && error == EPIPE) return true;
    tcp_info info{};
    size = sizeof info;
    if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &size) != 0 ||
        info.tcpi_state != TCP_CLOSE_WAIT)
      return false;
    int unacknowledged = 0;
    return ::ioctl(fd, SIOCOUTQ, &unacknowledged) == 0 && unacknowledged > 0;
  }

  std::chrono::steady_clock::time_point idle_since{};

 private:
  std::variant<upstream_tcp_stream, upstream_tls_stream> stream_;
  beast::flat_buffer buffer_;
  bool reset_armed_ = false;  // the zero linger is set (arm_reset)
  bool reset_sent_ = false;   // reset_now() ended the connection
  // Not value-initialised: zeroing 16 KiB per connection is wasted (the parser writes before
  // anything reads).
  std::array<char, 16 * 1024> body_buffer_;
};

}  // namespace tether::net
