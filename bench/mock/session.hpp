// One client connection to the mock (plain or TLS): HTTP/1.1 keep-alive, requests answered one
// at a time, with a read kept pending throughout so that a client's close is seen at once.
#pragma once

#include <string_view>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>

namespace tether::mock {

class stats_registry;
class peer_watch;

// path_prefix: where the API is served ("" = at the root); it must outlive the session.
void start_plain_session(boost::asio::ip::tcp::socket socket, stats_registry& stats,
                         std::string_view path_prefix, peer_watch& watch);
void start_tls_session(boost::asio::ip::tcp::socket socket, boost::asio::ssl::context& tls,
                       stats_registry& stats, std::string_view path_prefix, peer_watch& watch);

}  // namespace tether::mock
