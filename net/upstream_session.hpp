// One upstream_exchange: one request and its response on one connection (pooled or new).
//
// clang-format off
//   start ─▶ [pooled?] ─yes───────────────────────▶ write ─▶ read head ─▶ read body* ─▶ park/close
//               │ no                                ▲
//               ▼                                   │
//           resolve ─▶ connect ─▶ [tls] handshake ──┘
//           └───────── connect_timeout ──────────┘
// clang-format on
//
// A pooled connection that ends before any byte of the answer, closed by the upstream before it
// could read the request, is reported as stale_connection; the actors decide to send again.
//
// Every handler runs on one io thread (io_executor.hpp). cancel() may come from any thread: it sets
// a flag that every handler checks before it starts the next operation (a close alone would be lost
// while name resolution runs, since no socket is open then), and closes whatever is open.
// on_closed is reported once no operation is pending and no handler will run again.
// The request's close_at is the same cancel, timed on the io context's timer heap.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "net/timer_heap.hpp"
#include "net/timer_service.hpp"
#include "net/upstream.hpp"
#include "net/upstream_connection.hpp"
#include "net/upstream_pool.hpp"
#include "net/upstream_response_parser.hpp"

namespace tether::net {

// What all exchanges towards one upstream share. Held by every session, so it outlives the
// upstream_client while exchanges still run.
struct upstream_origin {
  upstream_origin(asio::io_context& io_context, upstream_endpoint ep);

  asio::io_context& io;
  const upstream_endpoint endpoint;
  const std::string service;      // the port, as the resolver wants it
  const std::string host_header;  // host[:port]
  // An IP literal's endpoint: connected without the resolver, whose own thread would cost two
  // thread hand-offs and a getaddrinfo per new connection; and given no SNI (RFC 6066 §3).
  const std::optional<asio::ip::tcp::endpoint> literal;
  asio::ssl::context tls;
  std::shared_ptr<upstream_pool> pool;
  // Looked up once: Asio's service lookup takes the io_context's mutex on every call.
  timer_heap& timers;
};

class upstream_session : public upstream_exchange,
                         public std::enable_shared_from_this<upstream_session> {
 public:
  // `pooled` is an idle connection taken from the pool, or nullptr for a new one.
  // `affinity`: run on that caller connection's executor (else the pooled connection's, or the
  // origin's context's).
  upstream_session(std::shared_ptr<upstream_origin> origin,
                   std::shared_ptr<upstream_connection> pooled, upstream_request request,
                   std::shared_ptr<upstream_events> events,
                   std::shared_ptr<const connection_affinity> affinity = nullptr);

  void run();
  void cancel() override;

 private:
  using error_code = boost::system::error_code;

  // Wraps a member as a completion handler counted in pending_, so that on_closed waits for it.
  template <class... Args>
  auto tracked(void (upstream_session::*fn)(Args...));
  void make_connection();

  void do_start();
  void do_resolve();
  void on_resolve(const error_code& ec, const asio::ip::tcp::resolver::results_type& results);
  void on_connect_deadline(const error_code& ec);
  void on_connect(const error_code& ec, const asio::ip::tcp::endpoint& endpoint);
  void do_handshake();
  void on_handshake(const error_code& ec);
  void on_connected();
  void do_write();
  std::array<boost::asio::const_buffer, 2> unsent(std::size_t written) const;
  void on_write(const error_code& ec, std::size_t bytes);
  void do_read_head();
  void read_head_plain();
  void on_head_bytes(const error_code& ec, std::size_t bytes);
  void on_read_head(const error_code& ec, std::size_t bytes);
  void do_read_body();
  void read_body_plain();
  void on_body_bytes(const error_code& ec, std::size_t bytes);
  void on_read_body(error_code ec, std::size_t bytes);
  void on_cancel();
  void on_close_at();
  bool stale(const error_code& ec);
  void await_reset();
  void on_reset_wait(const error_code& ec);

  void complete();
  void fail(upstream_failure kind, std::string message);
  void finish();
  void report_closed_if_done();
  std::string where() const;

  const std::shared_ptr<upstream_origin> origin_;
  io_executor executor_;
  std::shared_ptr<upstream_events> events_;  // released after on_closed (breaks cycles)
  const std::string head_;                   // the request's head
  const shared_body body_;                   // and its body, the request's own buffer
  const bool head_request_;                  // its response has no body, whatever its head says
  const std::optional<std::chrono::steady_clock::time_point> close_at_;
  const bool reused_;  // on a pooled connection: its failure before any byte may be stale
  std::shared_ptr<timer> close_timer_;  // armed by do_start() when close_at_ is set
  std::shared_ptr<upstream_connection> connection_;
  // Made only for a new connection: most exchanges run on a pooled one (a timer made per
  // exchange looked its service up under the io context's mutex).
  std::optional<asio::ip::tcp::resolver> resolver_;
  std::optional<asio::steady_timer> connect_timer_;
  std::optional<upstream_response_parser> parser_;

  std::atomic<bool> cancelled_{false};
  std::atomic<int> pending_{0};
  // Strand-only state below.
  bool resolving_ = false;
  bool connecting_ = false;  // resolve + connect + handshake, under connect_timeout
  bool connect_timed_out_ = false;
  bool connected_reported_ = false;
  bool heard_ = false;          // a byte of the answer arrived (an interim response's included)
  bool reset_awaited_ = false;  // after the upstream's FIN: its reset, or the grace, decides
  bool done_ = false;
  bool closed_reported_ = false;
};

}  // namespace tether::net
