// The client-facing HTTP/1.1 server, seen from outside net/. The session owns the socket and the
// protocol (limits, keep-alive, pipelining, timeouts); what to answer is decided by a handler.
//
//   listener ──accept──▶ downstream_session ──request──▶ request_handler (the gateway, actors/)
//                              ▲   │                          │
//                              │   └─on_client_gone()─────────▶ exchange_observer
//                              └──── response_channel ◀───────┘ (send_full / start_stream / ...)
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "net/http_types.hpp"
#include "net/io_group.hpp"

namespace tether::net {

// What net/ found wrong with a request before any handler could look at its body.
enum class protocol_error {
  none,
  body_too_large,     // Content-Length or chunked body over server.max_request_bytes (413)
  headers_too_large,  // header bytes or field count over the limits (431)
  malformed,          // unparsable HTTP, bad header value, conflicting lengths (400, then close)
};

struct incoming_request {
  std::string method;
  std::string target;  // as sent, e.g. "/v1/chat/completions"
  header_list headers;
  std::string body;
  protocol_error error = protocol_error::none;
  std::string error_detail;  // human-readable, never echoes the body
  // When the first byte of this request was read: the deadline counts from here.
  std::chrono::steady_clock::time_point arrival;
  std::chrono::system_clock::time_point arrival_wall;
};

// The handler's way back to the client. Thread-safe: calls are queued in order and carried out on
// the session's io thread (its io_context is run by that one thread: net/io_executor.hpp); made on
// that thread, every call but abort() is carried out at once.
// A response is either one send_full, or start_stream + send_chunk* + end_stream.
// Calls after the client left are ignored.
struct connection_affinity;  // net/connection_affinity.hpp

class response_channel {
 public:
  virtual ~response_channel() = default;
  virtual void send_full(int status, header_list headers, std::string body) = 0;
  virtual void start_stream(int status, header_list headers) = 0;  // chunked transfer encoding
  virtual void send_chunk(std::string data) = 0;
  virtual void end_stream() = 0;
  // Ends the exchange without a proper end (used when the response cannot be completed):
  // the connection is closed, no keep-alive.
  virtual void abort() = 0;
  // This connection's io thread (its executor), opaque, for the upstream exchanges made for it
  // (upstream_client::start): they then run on that thread too.
  virtual std::shared_ptr<const connection_affinity> affinity() const = 0;
  // The caller's IP address as bytes (4 or 16; empty when unknown), read from the socket only
  // when asked: an open gateway tells a caller's calls by it.
  virtual std::string peer_address() const { return {}; }
};

// Told, at most once, that the client went away (EOF or reset) before the response was complete.
class exchange_observer {
 public:
  virtual ~exchange_observer() = default;
  virtual void on_client_gone() = 0;
};

// Called on an io thread for every complete request (and for requests net/ refused, with
// `error` set; the handler still answers them, so that they are logged and counted).
// May return nullptr when the response was already sent and there is nothing to cancel.
using request_handler = std::function<std::shared_ptr<exchange_observer>(
    incoming_request, std::shared_ptr<response_channel>)>;

struct server_limits {
  std::uint64_t max_request_bytes = 4194304;
  std::uint64_t max_header_bytes = 16384;
  std::uint32_t max_header_fields = 100;
  std::uint32_t max_connections = 10000;
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds keepalive_timeout{60000};
};

// Accepts connections and runs their sessions on the members of an io_group, spread evenly.
// Thread-safe.
class http_server {
 public:
  http_server(const io_group& io, server_limits limits, request_handler handler);
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  // Binds and starts accepting; returns the bound port (useful with port 0). Throws on failure.
  std::uint16_t listen(const std::string& host, std::uint16_t port);
  // Stops accepting new connections and closes idle keep-alive ones (sessions in an exchange
  // finish it and then close).
  void stop_accepting();
  // Closes every connection now.
  void close_all();
  std::size_t open_connections() const;
  // How many accepts failed for lack of descriptors or memory (each retried after a pause).
  std::uint64_t accept_failures() const;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace tether::net
