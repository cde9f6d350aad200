#include "net/upstream_session.hpp"

#include <boost/beast/core/read_size.hpp>

#include "net/buffered_parse.hpp"
#include "net/connection_affinity.hpp"
#include "net/header_text.hpp"
#include "net/timer_heap.hpp"
#include "net/upstream_wire.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>
#include <string_view>
#include <utility>

namespace tether::net {

namespace http = beast::http;

namespace {

constexpr std::uint32_t header_limit = 64 * 1024;
// How long a pooled connection's FIN, come before any byte of the answer, waits for the reset
// that says the request was left unread: a server shuts the connection down and then closes it,
// two calls, and the woken gateway may read the FIN between them. Only on that failure path.
constexpr auto reset_grace = std::chrono::milliseconds(50);
constexpr std::size_t head_read_size = 8 * 1024;

std::string strip_brackets(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    return host.substr(1, host.size() - 2);
  return host;
}

std::optional<asio::ip::tcp::endpoint> literal_endpoint(const upstream_endpoint& ep) {
  boost::system::error_code ec;
  auto address = asio::ip::make_address(strip_brackets(ep.host), ec);
  if (ec) return std::nullopt;
  return asio::ip::tcp::endpoint{address, ep.port};
}

std::string make_host_header(const upstream_endpoint& ep) {
  const std::uint16_t default_port = ep.tls ? 443 : 80;
  std::string host = ep.host;
  if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";
  if (ep.port == default_port) return host;
  return host + ":" + std::to_string(ep.port);
}

asio::ssl::context make_tls_context(const upstream_endpoint& ep) {
  asio::ssl::context ctx(asio::ssl::context::tls_client);
  ctx.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                  asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                  asio::ssl::context::no_tlsv1_1);
  SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_2_VERSION);
  // Reads SSL_CERT_FILE / SSL_CERT_DIR now, so a test or an operator can point it elsewhere.
  if (ep.tls) ctx.set_default_verify_paths();
  return ctx;
}

const boost::system::error_category& http_category() {
  return http::make_error_code(http::error::end_of_stream).category();
}

std::string tls_failure_message(const boost::system::error_code& ec, SSL* ssl) {
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK)
    return std::string("certificate verification failed: ") + X509_verify_cert_error_string(verify);
  if (ec.category() == asio::error::get_ssl_category() &&
      ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == SSL_R_CERTIFICATE_VERIFY_FAILED)
    return "certificate verification failed: " + ec.message();
  return "TLS handshake failed: " + ec.message();
}

}  // namespace

upstream_origin::upstream_origin(asio::io_context& io_context, upstream_endpoint ep)
    : io(io_context),
      endpoint(std::move(ep)),
      service(std::to_string(endpoint.port)),
      host_header(make_host_header(endpoint)),
      literal(literal_endpoint(endpoint)),
      tls(make_tls_context(endpoint)),
      pool(std::make_shared<upstream_pool>(io, endpoint.max_idle_connections,
                                           endpoint.idle_timeout)),
      timers(timer_heap::of(io)) {}

upstream_session::upstream_session(std::shared_ptr<upstream_origin> origin,
                                   std::shared_ptr<upstream_connection> pooled,
                                   upstream_request request,
                                   std::shared_ptr<upstream_events> events,
                                   std::shared_ptr<const connection_affinity> affinity)
    : origin_(std::move(origin)),
      executor_(affinity ? affinity->executor
                : pooled ? pooled->executor()
                         : origin_->io.get_executor()),
      events_(std::move(events)),
      head_(upstream_head(request, origin_->host_header)),
      body_(request.body),
      head_request_(request.method == "HEAD"),
      close_at_(request.close_at),
      reused_(pooled != nullptr),
      connection_(std::move(pooled)) {}

template <class... Args>
auto upstream_session::tracked(void (upstream_session::*fn)(Args...)) {
  ++pending_;
  // Bound to this exchange's executor: a pooled socket's own is that of whoever made it, which
  // may be another io thread's.
  return asio::bind_executor(executor_, [self = shared_from_this(), fn](Args... args) {
    --self->pending_;
    (self.get()->*fn)(std::forward<Args>(args)...);
    self->report_closed_if_done();
  });
}

// At once when called on the io thread (the connection actor's jobs run on the io thread): a post
// cost an io round per request (a pass through the reactor, epoll_wait, before it ran).
void upstream_session::run() {
  asio::dispatch(executor_, tracked(&upstream_session::do_start));
}

void upstream_session::cancel() {
  if (cancelled_.exchange(true)) return;
  // At once when called on this io thread (the caller's connection: its deadline, its disconnect).
  asio::dispatch(executor_, tracked(&upstream_session::on_cancel));
}

void upstream_session::on_cancel() {
  if (done_) return;
  if (resolving_) {
    // Resolution cannot be interrupted (getaddrinfo runs to its end); its late result is
    // dropped by on_resolve, so the exchange may end now.
    finish();
    return;
  }
  // Resets the connection and aborts the pending operation; its handler sees cancelled_ and
  // starts nothing new. The descriptor is released with this session (finish keeps it).
  if (connect_timer_) connect_timer_->cancel();
  if (connection_) connection_->reset_now();
}

void upstream_session::on_close_at() {
  if (done_ || cancelled_.exchange(true)) return;
  on_cancel();
}

void upstream_session::do_start() {
  if (cancelled_) return finish();
  if (close_at_) {
    // Holds the session weakly: finish() cancels it when the exchange ends first.
    close_timer_ = origin_->timers.start(
        *close_at_,
        [weak = weak_from_this()] {
          if (auto self = weak.lock()) {
            self->on_close_at();
            self->report_closed_if_done();
          }
        },
        executor_);
  }
  if (connection_) {
    connected_reported_ = true;
    events_->on_connected(true);
    return do_write();
  }
  do_resolve();
}

std::string upstream_session::where() const {
  return origin_->endpoint.host + ":" + origin_->service;
}

void upstream_session::do_resolve() {
  connecting_ = true;
  resolving_ = true;
  if (!connect_timer_) connect_timer_.emplace(executor_);
  connect_timer_->expires_after(origin_->endpoint.connect_timeout);
  connect_timer_->async_wait(tracked(&upstream_session::on_connect_deadline));
  if (origin_->literal) {
    resolving_ = false;
    make_connection();
    connection_->tcp().async_connect(std::array{*origin_->literal},
                                     tracked(&upstream_session::on_connect));
    return;
  }
  // Not tracked: a cancel or the deadline ends the exchange without waiting for getaddrinfo.
  if (!resolver_) resolver_.emplace(executor_);
  resolver_->async_resolve(
      strip_brackets(origin_->endpoint.host), origin_->service,
      asio::bind_executor(executor_, [self = shared_from_this()](
                                         const error_code& ec,
                                         const asio::ip::tcp::resolver::results_type& results) {
        self->on_resolve(ec, results);
        self->report_closed_if_done();
      }));
}

void upstream_session::on_resolve(const error_code& ec,
                                  const asio::ip::tcp::resolver::results_type& results) {
  if (done_ || !resolving_) return;
  resolving_ = false;
  if (cancelled_) return finish();
  if (ec)
    return fail(upstream_failure::connect_failed,
                "cannot resolve " + origin_->endpoint.host + ": " + ec.message());
  make_connection();
  connection_->tcp().async_connect(results, tracked(&upstream_session::on_connect));
}

void upstream_session::make_connection() {
  if (origin_->endpoint.tls)
    connection_ = std::make_shared<upstream_connection>(executor_, origin_->tls);
  else
    connection_ = std::make_shared<upstream_connection>(executor_);
}

void upstream_session::on_connect_deadline(const error_code& ec) {
  if (ec || done_ || !connecting_ || connect_timer_->expiry() > std::chrono::steady_clock::now())
    return;
  const auto after =
      " timed out after " + std::to_string(origin_->endpoint.connect_timeout.count()) + " ms";
  if (resolving_) {
    resolving_ = false;
    if (resolver_) resolver_->cancel();
    return fail(upstream_failure::connect_failed,
                "connect timed out: resolving " + origin_->endpoint.host + after);
  }
  // Connect or handshake is pending: closing the socket ends it, its handler reports.
  connect_timed_out_ = true;
  if (connection_) connection_->close();
}

void upstream_session::on_connect(const error_code& ec, const asio::ip::tcp::endpoint&) {
  if (cancelled_) return finish();
  if (connect_timed_out_)
    return fail(upstream_failure::connect_failed,
                "connect timed out: connecting to " + where() + " timed out after " +
                    std::to_string(origin_->endpoint.connect_timeout.count()) + " ms");
  if (ec == asio::error::connection_refused)
    return fail(upstream_failure::connect_failed, "connection refused by " + where());
  if (ec)
    return fail(upstream_failure::connect_failed,
                "cannot connect to " + where() + ": " + ec.message());
  connection_->arm_reset();
  if (!connection_->tls()) return on_connected();
  do_handshake();
}

void upstream_session::do_handshake() {
  auto& stream = connection_->tls_stream();
  const auto& ep = origin_->endpoint;
  if (!origin_->literal) SSL_set_tlsext_host_name(stream.native_handle(), ep.host.c_str());
  if (ep.verify_peer) {
    stream.set_verify_mode(asio::ssl::verify_peer);
    // host_name_verification rejects without saying why; the X509 error makes the message
    // name the mismatch.
    stream.set_verify_callback([check = asio::ssl::host_name_verification(strip_brackets(ep.host))](
                                   bool preverified, asio::ssl::verify_context& ctx) mutable {
      const bool ok = check(preverified, ctx);
      if (preverified && !ok)
        X509_STORE_CTX_set_error(ctx.native_handle(), X509_V_ERR_HOSTNAME_MISMATCH);
      return ok;
    });
  } else {
    stream.set_verify_mode(asio::ssl::verify_none);
  }
  stream.async_handshake(asio::ssl::stream_base::client, tracked(&upstream_session::on_handshake));
}

void upstream_session::on_handshake(const error_code& ec) {
  if (cancelled_) return finish();
  if (connect_timed_out_)
    return fail(upstream_failure::connect_failed,
                "connect timed out: TLS handshake with " + where() + " timed out after " +
                    std::to_string(origin_->endpoint.connect_timeout.count()) + " ms");
  if (ec)
    return fail(upstream_failure::tls_failed,
                tls_failure_message(ec, connection_->tls_stream().native_handle()));
  on_connected();
}

void upstream_session::on_connected() {
  connecting_ = false;
  if (!connection_->tls()) {
    // For do_write's synchronous attempt: would_block instead of a wait. Asio's asynchronous
    // operations are unaffected. Pooled connections keep the mode. (The asynchronous connect
    // leaves the socket registered for writability, so each request's acknowledgement wakes
    // the reactor once, for nothing; registering the socket again without it cost an epoll_ctl
    // at every close instead — when many deadlines pass at once, many sockets close together —
    // and saved no work per request.)
    error_code ignored;
    connection_->tcp().socket().non_blocking(true, ignored);
  }
  if (connect_timer_) connect_timer_->cancel();
  if (!connected_reported_) {
    connected_reported_ = true;
    events_->on_connected(false);
  }
  do_write();
}

void upstream_session::do_write() {
  if (cancelled_) return finish();
  // Plain TCP: the request is written at once on the non-blocking socket (it nearly always fits
  // the socket's buffer), without an asynchronous operation and its completion through the io
  // queue; only what the socket cannot take now is written asynchronously.
  std::size_t written = 0;
  const std::size_t total = head_.size() + body_.size();
  if (!connection_->tls()) {
    error_code ec;
    auto& socket = connection_->tcp().socket();
    while (written < total) {
      const auto n = socket.write_some(unsent(written), ec);
      if (ec) break;
      written += n;
    }
    if (written == total) return do_read_head();
    if (ec != asio::error::would_block && ec != asio::error::try_again) return on_write(ec, 0);
  }
  connection_->visit([this, written](auto& stream) {
    asio::async_write(stream, unsent(written), tracked(&upstream_session::on_write));
  });
}

// What is left to write after `written` bytes: the rest of the head, then the body.
std::array<asio::const_buffer, 2> upstream_session::unsent(std::size_t written) const {
  const auto body = asio::buffer(body_.view().data(), body_.size());
  if (written < head_.size()) return {asio::buffer(head_) + written, body};
  return {body + (written - head_.size()), asio::const_buffer{}};
}

void upstream_session::on_write(const error_code& ec, std::size_t) {
  if (cancelled_) return finish();
  if (ec) {
    if (stale(ec))
      return fail(upstream_failure::stale_connection,
                  "pooled connection to " + where() +
                      " was closed by the upstream before the request: " + ec.message());
    return fail(upstream_failure::reset,
                "connection to " + where() + " broke while sending the request: " + ec.message());
  }
  do_read_head();
}

// The upstream's FIN came before any byte of the answer on a pooled connection, its reset not
// yet: whichever comes first, the reset (the socket's error) or the grace, decides.
void upstream_session::await_reset() {
  reset_awaited_ = true;
  if (!connect_timer_) connect_timer_.emplace(executor_);
  connect_timer_->expires_after(reset_grace);
  connect_timer_->async_wait(tracked(&upstream_session::on_reset_wait));
  connection_->tcp().socket().async_wait(asio::ip::tcp::socket::wait_error,
                                         tracked(&upstream_session::on_reset_wait));
}

void upstream_session::on_reset_wait(const error_code&) {
  if (done_) return;
  if (cancelled_) return finish();
  connect_timer_->cancel();
  error_code ignored;
  connection_->tcp().socket().cancel(ignored);
  on_read_head(http::error::end_of_stream, 0);
}

// A pooled connection's failure before any byte of the answer, where the socket shows the
// upstream had closed it before it could read the request (a failed send says so by itself).
// net/ only says so; whether to send the request again is the actors' decision.
bool upstream_session::stale(const error_code& ec) {
  if (!reused_ || heard_ || !connection_) return false;
  if (parser_ && parser_->got_some()) return false;
  if (connection_->buffer().size() > 0) return false;
  if (!parser_ || ec == asio::error::broken_pipe) return true;  // the send failed
  return connection_->closed_before_request();
}

void upstream_session::do_read_head() {
  if (cancelled_) return finish();
  parser_.emplace();
  parser_->limit_head(header_limit);
  // The caller enforces max_response_bytes itself (by cancelling).
  parser_->body_limit(boost::none);
  if (head_request_) parser_->skip(true);
  if (!connection_->tls()) return read_head_plain();
  connection_->visit([this](auto& stream) {
    http::async_read_header(stream, connection_->buffer(), *parser_,
                            tracked(&upstream_session::on_read_head));
  });
}

// Plain TCP: the socket's reads feed the parser directly, as Beast's async_read_header would but
// without its composed operation's layers (and the bytes an interim response left are parsed at
// once).
void upstream_session::read_head_plain() {
  auto& buffer = connection_->buffer();
  if (buffer.size() > 0) {
    error_code ec;
    put_head_buffered(*parser_, buffer, ec);
    if (ec || parser_->is_header_done()) return on_read_head(ec, 0);
  }
  // Sized as Beast's reads size it (512 bytes into an empty buffer, else what its capacity
  // holds): a held stream keeps this buffer, and 10,000 of them keep 10,000.
  connection_->tcp().socket().async_read_some(
      buffer.prepare(beast::read_size(buffer, head_read_size)),
      tracked(&upstream_session::on_head_bytes));
}

void upstream_session::on_head_bytes(const error_code& ec, std::size_t bytes) {
  if (cancelled_) return finish();
  // Beast's mapping of a read's end: nothing at all is end_of_stream, half a head is
  // partial_message.
  if (ec == asio::error::eof)
    return on_read_head(
        parser_->got_some() ? http::error::partial_message : http::error::end_of_stream, 0);
  if (ec) return on_read_head(ec, 0);
  if (bytes > 0) heard_ = true;
  connection_->buffer().commit(bytes);
  read_head_plain();
}

void upstream_session::on_read_head(const error_code& ec, std::size_t) {
  if (cancelled_) return finish();
  if (ec) {
    if (ec.category() == http_category() && ec != http::error::end_of_stream &&
        ec != http::error::partial_message)
      return fail(upstream_failure::malformed,
                  "malformed response head from " + where() + ": " + ec.message());
    if (stale(ec))
      return fail(upstream_failure::stale_connection,
                  "pooled connection to " + where() +
                      " was closed by the upstream before it read the request: " + ec.message());
    if (ec == http::error::end_of_stream && reused_ && !heard_ && !reset_awaited_)
      return await_reset();
    return fail(upstream_failure::reset,
                "connection to " + where() + " broke before the response head: " + ec.message());
  }
  heard_ = true;
  const int status = parser_->status();
  // Interim responses (100 Continue, 103 Early Hints) precede the real one.
  if (status / 100 == 1 && status != 101) return do_read_head();
  events_->on_head(status, std::move(parser_->headers()));
  do_read_body();
}

void upstream_session::do_read_body() {
  if (cancelled_) return finish();
  if (parser_->is_done()) return complete();
  auto& body = parser_->body();
  auto& buffer = connection_->body_buffer();
  body.data = buffer.data();
  body.size = buffer.size();
  // What came with the head (for most responses, all of it) is parsed here: Beast's read_some
  // would parse the same bytes without reading and post its completion through the io queue.
  // Bytes that cannot be parsed yet (half a chunk header) need a read: then this falls through.
  if (connection_->buffer().size() > 0) {
    error_code ec;
    const auto parsed = put_buffered(*parser_, connection_->buffer(), ec);
    if (ec || parsed > 0 || parser_->is_done()) return on_read_body(ec, 0);
  }
  // One read per round: whatever arrived is passed on at once (SSE must not wait).
  if (!connection_->tls()) return read_body_plain();
  connection_->visit([this](auto& stream) {
    http::async_read_some(stream, connection_->buffer(), *parser_,
                          tracked(&upstream_session::on_read_body));
  });
}

// Plain TCP: as read_head_plain, the socket's reads feed the parser directly instead of through
// Beast's read_some and its stream's composed operation, a streamed event's path. Sized as
// Beast's read_some sizes its reads.
void upstream_session::read_body_plain() {
  auto& buffer = connection_->buffer();
  connection_->tcp().socket().async_read_some(buffer.prepare(beast::read_size(buffer, 65536)),
                                              tracked(&upstream_session::on_body_bytes));
}

void upstream_session::on_body_bytes(const error_code& ec, std::size_t bytes) {
  if (cancelled_ || !connection_) return finish();
  error_code parsed;
  // Beast's mapping of the connection's end mid-body: the end of a body delimited by it, else
  // partial_message.
  if (ec == asio::error::eof) {
    parser_->put_eof(parsed);
    return on_read_body(parsed, 0);
  }
  if (ec) return on_read_body(ec, 0);
  connection_->buffer().commit(bytes);
  put_buffered(*parser_, connection_->buffer(), parsed);
  on_read_body(parsed, 0);
}

void upstream_session::on_read_body(error_code ec, std::size_t) {
  if (cancelled_ || !connection_) return finish();
  if (ec && ec == http::error::need_buffer) ec = {};
  // A body delimited by the end of the connection, over TLS without close_notify: the usual way
  // such servers end, and the parser has all there is.
  if (ec && ec == asio::ssl::error::stream_truncated && parser_->need_eof()) parser_->put_eof(ec);
  const auto& buffer = connection_->body_buffer();
  const auto produced = buffer.size() - parser_->body().size;
  if (produced > 0) events_->on_body(std::string(buffer.data(), produced));
  if (ec) {
    if (ec.category() == http_category() && ec != http::error::end_of_stream &&
        ec != http::error::partial_message)
      return fail(upstream_failure::malformed,
                  "malformed response body from " + where() + ": " + ec.message());
    return fail(upstream_failure::reset,
                "connection to " + where() + " broke mid-response: " + ec.message());
  }
  do_read_body();
}

void upstream_session::complete() {
  const bool keep_alive =
      parser_->keep_alive() && parser_->version() == 11 && connection_->buffer().size() == 0;
  if (keep_alive)
    origin_->pool->park(std::move(connection_));
  else
    connection_->close();
  connection_.reset();
  events_->on_end();
  finish();
}

void upstream_session::fail(upstream_failure kind, std::string message) {
  if (connection_) connection_->close();
  connection_.reset();
  if (!cancelled_) events_->on_failure(kind, std::move(message));
  finish();
}

void upstream_session::finish() {
  if (done_) return;
  done_ = true;
  resolving_ = false;
  connecting_ = false;
  if (resolver_) resolver_->cancel();
  if (connect_timer_) connect_timer_->cancel();
  if (close_timer_) close_timer_->cancel();
  if (connection_ && connection_->reset_sent()) return;  // released with this session
  if (connection_) connection_->abort();
  connection_.reset();
}

void upstream_session::report_closed_if_done() {
  if (!done_ || closed_reported_ || pending_ != 0) return;
  closed_reported_ = true;
  auto events = std::move(events_);
  events->on_closed();
}

}  // namespace tether::net
