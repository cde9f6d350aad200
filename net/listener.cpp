#include "net/listener.hpp"

#include <chrono>
#include <future>
#include <stdexcept>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/bind_handler.hpp>
#include <boost/system/system_error.hpp>

#include "net/downstream_session.hpp"
#include "net/receive_stamp.hpp"
#include "net/server_context.hpp"

namespace tether::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

namespace {

// Out of descriptors (EMFILE/ENFILE) or memory, accept fails while the connection waits in the
// backlog; retrying at once would spin. A short pause lets closing sessions free descriptors.
constexpr std::chrono::milliseconds accept_backoff{50};
constexpr std::chrono::seconds stop_wait{2};

}  // namespace

listener::listener(const io_group& io, std::shared_ptr<server_context> context)
    : group_(io),
      io_(*static_cast<asio::io_context*>(io.at(0).native())),
      context_(std::move(context)),
      strand_(asio::make_strand(io_)),
      acceptor_(strand_),
      backoff_(strand_) {}

std::uint16_t listener::open(const std::string& host, std::uint16_t port) {
  try {
    tcp::endpoint endpoint;
    beast::error_code ec;
    const auto address = asio::ip::make_address(host, ec);
    if (!ec) {
      endpoint = tcp::endpoint(address, port);
    } else {
      tcp::resolver resolver(io_);
      endpoint = *resolver.resolve(host, std::to_string(port)).begin();
    }
    acceptor_.open(endpoint.protocol());
    acceptor_.set_option(asio::socket_base::reuse_address(true));
    // Accepted sockets inherit it (checked: HttpServerArrivalTest passes without a per-session
    // setsockopt), and while one socket wants receive timestamps the kernel stamps every packet.
    // Enabling it only per connection would let the kernel turn stamping off whenever no
    // connection is open, and turning it on again is deferred to a work queue: the first
    // requests after a quiet spell would arrive unstamped (seen: a test failed that way).
    enable_receive_stamps(acceptor_.native_handle());
    acceptor_.bind(endpoint);
    acceptor_.listen(asio::socket_base::max_listen_connections);
    return acceptor_.local_endpoint().port();
  } catch (const boost::system::system_error& e) {
    // The code's message ("Address already in use"), not what(): Boost's names the header and
    // function that threw, which tells an operator nothing.
    throw std::runtime_error("cannot listen on " + host + ":" + std::to_string(port) + ": " +
                             e.code().message());
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot listen on " + host + ":" + std::to_string(port) + ": " +
                             e.what());
  }
}

void listener::start() {
  asio::dispatch(strand_, [self = shared_from_this()] { self->do_accept(); });
}

void listener::stop() {
  if (strand_.running_in_this_thread() || io_.stopped()) {
    close();
    return;
  }
  if (io_.get_executor().running_in_this_thread()) {
    asio::post(strand_, [self = shared_from_this()] { self->close(); });
    return;
  }
  // Callers (drain, tests) rely on new connects being refused once this returns.
  auto done = std::make_shared<std::promise<void>>();
  auto closed = done->get_future();
  asio::post(strand_, [self = shared_from_this(), done] {
    self->close();
    done->set_value();
  });
  closed.wait_for(stop_wait);
}

void listener::close() {
  stopped_ = true;
  beast::error_code ec;
  acceptor_.close(ec);
  backoff_.cancel();
}

// One connection per turn of the io queue, on purpose. After a stall, hundreds of new connections
// wait in the backlog with their requests sent; taken in one per turn, they trickle in while the
// connections already open are served. Taking the whole backlog at once was tried: every stalled
// request was then in flight together, and the requests that came after the resume waited
// behind all of them, so the backlog took longer to drain (docs/performance.md, "Accepting one
// connection per turn is admission control").
void listener::do_accept() {
  if (stopped_) return;
  auto& member = *static_cast<asio::io_context*>(group_.at(next_member_).native());
  next_member_ = (next_member_ + 1) % group_.size();
  acceptor_.async_accept(member.get_executor(),
                         beast::bind_front_handler(&listener::on_accept, shared_from_this()));
}

void listener::on_accept(beast::error_code ec, downstream_session::socket_type socket) {
  if (stopped_) return;
  if (ec == asio::error::connection_aborted) {  // the peer gave up before we accepted
    do_accept();
    return;
  }
  if (ec) {
    ++context_->accept_failures;
    backoff_.expires_after(accept_backoff);
    backoff_.async_wait(beast::bind_front_handler(&listener::on_backoff, shared_from_this()));
    return;
  }
  auto session = std::make_shared<downstream_session>(std::move(socket), context_);
  // Over the limit, the session is dropped here, which closes its socket: refused cleanly.
  session->start();
  do_accept();
}

void listener::on_backoff(beast::error_code ec) {
  if (ec || stopped_) return;
  do_accept();
}

}  // namespace tether::net
