// The client side towards the model servers, seen from outside net/. One upstream_client per
// configured upstream keeps the TLS context and a pool of idle keep-alive connections; one
// upstream_exchange is one request/response on one connection (fresh or pooled).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "net/http_types.hpp"
#include "net/io_group.hpp"
#include "net/shared_body.hpp"

namespace tether::net {

struct upstream_endpoint {
  bool tls = false;
  std::string host;
  std::uint16_t port = 80;
  std::chrono::milliseconds connect_timeout{2000};
  // TLS: peer verification against the system CA store (honours SSL_CERT_FILE / SSL_CERT_DIR).
  bool verify_peer = true;
  std::size_t max_idle_connections = 64;
  std::chrono::milliseconds idle_timeout{30000};
};

struct upstream_request {
  std::string method = "POST";
  std::string target;   // path with the upstream's prefix, e.g. "/v1/chat/completions"
  header_list headers;  // added as given (authorization, x-request-id, traceparent, ...)
  shared_body body;     // sent with Content-Length, from the request's own buffer
  // The exchange is cancelled at this moment, as by upstream_exchange::cancel(), on the socket's
  // own thread: the request's deadline, carried out where the socket is, so that the close does
  // not wait for the actors (at the deadline of many requests at once they are busy answering).
  // No failure is reported for it; the request's deadline answers. nullopt = never.
  std::optional<std::chrono::steady_clock::time_point> close_at;
  // On a new connection, never a pooled one: the resend of a request whose pooled connection
  // the upstream had closed (upstream_failure::stale_connection).
  bool fresh_connection = false;
};

enum class upstream_failure {
  connect_failed,  // resolve / connect refused / connect timeout
  tls_failed,      // handshake or certificate verification
  reset,           // the connection broke (before or after the head)
  malformed,       // not parsable as an HTTP response
  // A pooled connection that ended before any byte of the answer, where the socket shows the
  // upstream had closed it before it could read the request (the send failed; the upstream's
  // end never acknowledged the whole request; or it reset after its own orderly close, which
  // TCP does for data left unread). Nothing of the request was acted on.
  stale_connection,
};

// Callbacks from an io thread, in this order: on_head, on_body*, then on_end or on_failure;
// on_failure may also come first. on_closed comes exactly once, last, after the socket is
// closed (or parked in the pool) and no handler of this exchange will run again.
class upstream_events {
 public:
  virtual ~upstream_events() = default;
  virtual void on_connected(bool reused) = 0;
  virtual void on_head(int status, header_list headers) = 0;
  virtual void on_body(std::string bytes) = 0;  // decoded (de-chunked) body bytes as they arrive
  virtual void on_end() = 0;
  virtual void on_failure(upstream_failure kind, std::string message) = 0;
  virtual void on_closed() = 0;
};

class upstream_exchange {
 public:
  virtual ~upstream_exchange() = default;
  // Thread-safe, idempotent. Closes the socket (never returns it to the pool); the pending
  // operation ends, no further operation starts, and on_closed follows.
  virtual void cancel() = 0;
};

struct connection_affinity;  // net/connection_affinity.hpp

// The one thing the actors ask of an upstream: an exchange. upstream_client is the real one; the
// actor tests supply their own, which plays net/'s part (head, body, close) by hand.
class upstream_transport {
 public:
  virtual ~upstream_transport() = default;
  // Starts the exchange at once. With `affinity` (a caller connection's,
  // response_channel::affinity()), the exchange runs on that connection's io thread, which alone
  // runs its handlers (net/io_executor.hpp). Called on that thread, the exchange starts at once:
  // `events` may hear from it (a failure, even its close) before this returns.
  virtual std::shared_ptr<upstream_exchange> start(
      upstream_request request, std::shared_ptr<upstream_events> events,
      std::shared_ptr<const connection_affinity> affinity) = 0;
  // The upstream is gone from the config (a reload): its idle connections close now, and the
  // exchanges still running close theirs when they end instead of keeping them. Thread-safe.
  virtual void retire() {}
};

class upstream_client final : public upstream_transport {
 public:
  // Its connections are kept per member of `io`: an exchange uses those of its caller's thread.
  upstream_client(const io_group& io, upstream_endpoint endpoint);
  ~upstream_client() override;
  upstream_client(const upstream_client&) = delete;
  upstream_client& operator=(const upstream_client&) = delete;

  // On a pooled connection when one is idle, else a new one. A connection goes back to the pool
  // only after a complete response that allows keep-alive.
  std::shared_ptr<upstream_exchange> start(
      upstream_request request, std::shared_ptr<upstream_events> events,
      std::shared_ptr<const connection_affinity> affinity) override;
  std::shared_ptr<upstream_exchange> start(upstream_request request,
                                           std::shared_ptr<upstream_events> events) {
    return start(std::move(request), std::move(events), nullptr);
  }

  void retire() override;
  std::size_t idle_connections() const;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace tether::net
