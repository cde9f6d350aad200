#include "bench/mock/server.hpp"

#include <chrono>
#include <iostream>
#include <memory>
#include <string_view>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "bench/mock/peer_watch.hpp"
#include "bench/mock/session.hpp"
#include "bench/mock/stats.hpp"

namespace tether::mock {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

class listener {
 public:
  listener(asio::io_context& io, tcp::endpoint endpoint, asio::ssl::context* tls,
           stats_registry& stats, std::string_view path_prefix, peer_watch& watch)
      : acceptor_(io),
        retry_timer_(io),
        tls_(tls),
        stats_(stats),
        path_prefix_(path_prefix),
        watch_(watch) {
    acceptor_.open(endpoint.protocol());
    acceptor_.set_option(asio::socket_base::reuse_address(true));
    acceptor_.bind(endpoint);
    acceptor_.listen(asio::socket_base::max_listen_connections);
  }

  tcp::endpoint local_endpoint() const { return acceptor_.local_endpoint(); }

  void do_accept() {
    acceptor_.async_accept([this](error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (ec) {
        // Out of descriptors (thousands of clients): back off briefly instead of spinning.
        retry_timer_.expires_after(std::chrono::milliseconds(10));
        retry_timer_.async_wait([this](error_code wait_ec) {
          if (!wait_ec) do_accept();
        });
        return;
      }
      if (tls_ != nullptr) {
        start_tls_session(std::move(socket), *tls_, stats_, path_prefix_, watch_);
      } else {
        start_plain_session(std::move(socket), stats_, path_prefix_, watch_);
      }
      do_accept();
    });
  }

  void stop() {
    error_code ignored;
    acceptor_.close(ignored);
    retry_timer_.cancel();
  }

 private:
  tcp::acceptor acceptor_;
  asio::steady_timer retry_timer_;
  asio::ssl::context* tls_;
  stats_registry& stats_;
  std::string_view path_prefix_;  // the options' string, which outlives the server
  peer_watch& watch_;
};

std::string endpoint_text(const tcp::endpoint& endpoint) {
  auto address = endpoint.address().to_string();
  if (endpoint.address().is_v6()) address = "[" + address + "]";
  return address + ":" + std::to_string(endpoint.port());
}

}  // namespace

int run_server(const server_options& options) {
  // Declared first so that it outlives every session the io_context destroys.
  stats_registry stats;
  peer_watch watch;
  asio::io_context io(1);

  std::unique_ptr<asio::ssl::context> tls;
  if (options.tls_cert && options.tls_key) {
    tls = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
    tls->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                     asio::ssl::context::no_sslv3);
    tls->use_certificate_chain_file(*options.tls_cert);
    tls->use_private_key_file(*options.tls_key, asio::ssl::context::pem);
  }

  tcp::endpoint endpoint(asio::ip::make_address(options.host), options.port);
  listener accept_loop(io, endpoint, tls.get(), stats, options.path_prefix, watch);
  accept_loop.do_accept();

  asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](error_code ec, int) {
    if (ec) return;
    accept_loop.stop();
    io.stop();
  });

  std::cout << "tether-mock listening on " << endpoint_text(accept_loop.local_endpoint())
            << (tls ? " (tls)" : "") << std::endl;
  io.run();
  return 0;
}

}  // namespace tether::mock
