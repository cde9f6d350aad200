#include "net/downstream_session.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <limits>
#include <utility>
#include <vector>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/bind_handler.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>

#include "net/buffered_parse.hpp"
#include "net/connection_affinity.hpp"
#include "net/header_text.hpp"
#include "net/receive_stamp.hpp"
#include "net/request_framing.hpp"
#include "net/server_context.hpp"

namespace tether::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using steady = std::chrono::steady_clock;

namespace {

// Bytes of pipelined requests held while a response is pending; beyond it the session stops
// reading (and so stops noticing a disconnect) until the response is done.
constexpr std::size_t pipeline_cap = 64 * 1024;
constexpr std::size_t read_chunk = 8 * 1024;
constexpr std::size_t max_gather = 64;  // buffers per write (IOV_MAX is 1024)
// After the last response on a connection, unread request bytes would make close() send a
// reset that can destroy the response before the client reads it (a refused body, say):
// half-close, discard what still comes for a moment, then close.
constexpr std::chrono::milliseconds linger_timeout{1000};

const std::string continue_response = "HTTP/1.1 100 Continue\r\n\r\n";
const std::string timeout_response =
    "HTTP/1.1 408 Request Timeout\r\nServer: tether\r\nContent-Length: 0\r\n"
    "Connection: close\r\n\r\n";

// A header the handler passes must not be able to split the response (CR/LF injection).
bool valid_header(const http_header& header) {
  return is_token(header.name) && !has_line_break(header.value);
}

// The Date header's text changes once a second; formatting it per response (strftime) was a
// visible cost. Each io thread keeps the text of the current second.
const std::string& http_date() {
  thread_local std::time_t cached_second = -1;
  thread_local std::string cached;
  const std::time_t now = std::time(nullptr);
  if (now != cached_second) {
    std::tm tm{};
    gmtime_r(&now, &tm);
    char text[64];
    const auto n = std::strftime(text, sizeof text, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    cached.assign(text, n);
    cached_second = now;
  }
  return cached;
}

bool has_no_body(int status) {
  return status == 204 || status == 304;
}

// How the body is delimited: by its length, by chunks, or by the connection's end (an HTTP/1.0
// stream) and bodyless statuses.
struct body_framing {
  enum class kind { none, length, chunked } what = kind::none;
  std::size_t length = 0;
};

// The session owns the framing (Content-Length, Transfer-Encoding, Connection): the handler's
// copies of those are dropped. The head is sized once for the most it can take and written by
// copies (appended piece by piece, with a Content-Length line of its own and to_string for the
// status, it cost noticeably more).
std::string serialize_head(int status, const header_list& headers, body_framing framing,
                           bool keep_alive) {
  using namespace std::string_view_literals;
  const std::string_view reason = [&] {
    const auto known = http::int_to_status(static_cast<unsigned>(status));
    return known == http::status::unknown ? std::string_view{}
                                          : std::string_view{http::obsolete_reason(known)};
  }();
  const std::string& date = http_date();
  // Status line (≤ 3 digits, a sane_status), the headers, and what the session adds.
  std::size_t most = 32 + reason.size() + "Server: tether\r\n"sv.size() + 8 + date.size() +
                     "Transfer-Encoding: chunked\r\n"sv.size() + 20 +
                     "Connection: close\r\n"sv.size() + 2 + 24;
  for (const auto& header : headers) most += header.name.size() + header.value.size() + 4;
  std::string head(most, '\0');
  char* out = head.data();
  const auto put = [&out](std::string_view text) {
    std::memcpy(out, text.data(), text.size());
    out += text.size();
  };
  put("HTTP/1.1 "sv);
  out = std::to_chars(out, out + 12, status).ptr;
  if (!reason.empty()) {
    *out++ = ' ';
    put(reason);
  }
  put("\r\n"sv);
  bool has_server = false;
  bool has_date = false;
  for (const auto& header : headers) {
    if (!valid_header(header)) continue;
    const std::string_view name = header.name;
    if (iequals_ascii(name, "content-length") || iequals_ascii(name, "transfer-encoding") ||
        iequals_ascii(name, "connection"))
      continue;
    has_server = has_server || iequals_ascii(name, "server");
    has_date = has_date || iequals_ascii(name, "date");
    put(name);
    put(": "sv);
    put(header.value);
    put("\r\n"sv);
  }
  if (!has_server) put("Server: tether\r\n"sv);
  if (!has_date) {
    put("Date: "sv);
    put(date);
    put("\r\n"sv);
  }
  switch (framing.what) {
    case body_framing::kind::length:
      put("Content-Length: "sv);
      out = std::to_chars(out, out + 20, framing.length).ptr;
      put("\r\n"sv);
      break;
    case body_framing::kind::chunked:
      put("Transfer-Encoding: chunked\r\n"sv);
      break;
    case body_framing::kind::none:
      break;
  }
  if (!keep_alive) put("Connection: close\r\n"sv);
  put("\r\n"sv);
  head.resize(static_cast<std::size_t>(out - head.data()));
  return head;
}

// A chunk's size line: the size in hex, CRLF. The data follows it in the write queue as it came
// (not copied behind the size), and a CRLF after it. The size is written by hand: snprintf cost
// more than the rest of a streamed event's framing, and every event is a chunk. Short enough for
// std::string's inline buffer, so no allocation either.
std::string chunk_head(std::size_t n) {
  char size[20];  // 16 hex digits at most, then CRLF
  char* end = size + sizeof size;
  char* at = end;
  *--at = '\n';
  *--at = '\r';
  do {
    *--at = "0123456789abcdef"[n & 0xF];
    n >>= 4;
  } while (n != 0);
  return {at, static_cast<std::size_t>(end - at)};
}

int sane_status(int status) {
  return status >= 200 && status <= 999 ? status : 500;
}

// The handler's end of one exchange. It keeps the session alive while the handler holds it; if
// the handler lets go of it before completing the response, the connection is aborted rather
// than left waiting forever.
class session_channel final : public response_channel {
 public:
  session_channel(std::shared_ptr<downstream_session> session, std::uint64_t exchange)
      : session_(std::move(session)), exchange_(exchange) {}
  ~session_channel() override { session_->post_abort(exchange_); }
  session_channel(const session_channel&) = delete;
  session_channel& operator=(const session_channel&) = delete;

  void send_full(int status, header_list headers, std::string body) override {
    session_->post_send_full(exchange_, status, std::move(headers), std::move(body));
  }
  void start_stream(int status, header_list headers) override {
    session_->post_start_stream(exchange_, status, std::move(headers));
  }
  void send_chunk(std::string data) override {
    session_->post_send_chunk(exchange_, std::move(data));
  }
  void end_stream() override { session_->post_end_stream(exchange_); }
  void abort() override { session_->post_abort(exchange_); }
  std::shared_ptr<const connection_affinity> affinity() const override {
    return session_->affinity();
  }
  std::string peer_address() const override { return session_->peer_address(); }

 private:
  std::shared_ptr<downstream_session> session_;
  std::uint64_t exchange_;
};

}  // namespace

std::string downstream_session::peer_address() const {
  beast::error_code ec;
  const auto endpoint = stream_.socket().remote_endpoint(ec);
  if (ec) return {};
  const auto address = endpoint.address();
  if (address.is_v4()) {
    const auto bytes = address.to_v4().to_bytes();
    return std::string(bytes.begin(), bytes.end());
  }
  const auto bytes = address.to_v6().to_bytes();
  return std::string(bytes.begin(), bytes.end());
}

downstream_session::downstream_session(socket_type socket, std::shared_ptr<server_context> context)
    : executor_(socket.get_executor()),
      stream_(std::move(socket)),
      context_(std::move(context)),
      timer_(executor_) {
  affinity_ = std::make_shared<const connection_affinity>(connection_affinity{executor_});
  // Chunks are SSE events: each must leave at once, not wait for the previous one's ACK.
  beast::error_code ec;
  stream_.socket().set_option(tcp::no_delay(true), ec);
  // Writes are tried at once (do_write): a synchronous write must fail with would_block, not
  // wait. Asio's asynchronous operations are unaffected.
  stream_.socket().non_blocking(true, ec);
  // Receive timestamps (SO_TIMESTAMPNS) come with the socket: accepted sockets inherit them from
  // the listener (listener.cpp).
}

downstream_session::~downstream_session() {
  if (registered_) context_->sessions.remove(this);
}

bool downstream_session::start() {
  // Set before the session becomes visible to close_all's snapshot (under the registry's mutex),
  // so that a do_close posted from there reads it without a race.
  registered_ = true;
  if (!context_->sessions.try_add(shared_from_this(), context_->limits.max_connections)) {
    registered_ = false;
    return false;
  }
  asio::dispatch(executor_, [self = shared_from_this()] {
    self->connected_ = steady::now();
    self->connected_wall_ = std::chrono::system_clock::now();
    self->do_wait_request();
  });
  return true;
}

void downstream_session::close_if_idle() {
  asio::post(executor_, [self = shared_from_this()] {
    if (self->phase_ == phase::waiting) self->do_close();
  });
}

void downstream_session::close_now() {
  asio::post(executor_, [self = shared_from_this()] { self->do_close(); });
}

// --- reading a request -------------------------------------------------------------------------

void downstream_session::do_wait_request() {
  if (phase_ == phase::closed) return;
  if (context_->draining) {
    do_close();
    return;
  }
  parser_.emplace();
  parser_->limit_head(static_cast<std::uint32_t>(std::min<std::uint64_t>(
      context_->limits.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
  parser_->body_limit(context_->limits.max_request_bytes);
  timed_out_ = false;

  if (buffer_.size() > 0) {  // a pipelined request is already here
    fresh_ = false;
    const auto at =
        buffered_arrival_.value_or(moment{steady::now(), std::chrono::system_clock::now()});
    arrival_ = at.steady;
    arrival_wall_ = at.wall;
    buffered_arrival_.reset();
    do_read_header();
    return;
  }
  // Waiting for the first byte: the idle timeout (the header timeout on a fresh connection), on
  // which the connection is closed silently.
  phase_ = phase::waiting;
  arm_timer(timer_use::idle, fresh_ ? connected_ + context_->limits.header_timeout
                                    : steady::now() + context_->limits.keepalive_timeout);
  // The wait that watched the client during the response (do_watch_read) is still pending and
  // now waits for the next request.
  do_wait_readable();
}

// The first bytes of a request are read with recvmsg, which also gives the kernel's receive
// timestamp: the request's arrival, however long it then waited for this thread. What waits for
// them is a readiness wait, not a read: Asio starts it by re-arming the socket's registration
// (EPOLL_CTL_MOD), and the kernel reports at once a socket already readable, so bytes that came
// before the wait are not missed. A 1-byte peek did the same with a recv, which gave EAGAIN when
// the client had sent nothing yet (while its request is answered) and, once it had, read the
// byte again before the recvmsg: 3 system calls around each request's read, now 2.
// One wait serves every phase: it watches for the client leaving during an exchange and then,
// still pending, becomes the wait for the next request — no cancel and no new read per request.
// An error, a reset or the close is learnt by the read that follows it.
void downstream_session::do_wait_readable() {
  if (wait_pending_) return;
  wait_pending_ = true;
  stream_.socket().async_wait(
      tcp::socket::wait_read,
      beast::bind_front_handler(&downstream_session::on_readable, shared_from_this()));
}

void downstream_session::on_readable(beast::error_code ec) {
  wait_pending_ = false;
  switch (phase_) {
    case phase::closed:
    case phase::reading:  // a pipelined request is being read from the buffer
      return;
    // The wait fails only when the socket was closed or cancelled here.
    case phase::waiting:
      if (ec) {  // the idle timeout or a drain closed it: no request was lost
        do_close();
        return;
      }
      on_request_bytes();
      return;
    case phase::exchange:
      if (ec) {
        do_close();
        return;
      }
      on_pipelined_bytes();  // the client's next request, or its leaving
      return;
    case phase::lingering:
      if (ec) {
        do_close();
        return;
      }
      on_lingering_bytes();
      return;
  }
}

stamped_read downstream_session::read_into_buffer(std::size_t limit) {
  auto space = buffer_.prepare(limit);
  const auto read = read_stamped(stream_.socket().native_handle(), space.data(), space.size());
  if (read.n > 0) buffer_.commit(static_cast<std::size_t>(read.n));
  return read;
}

namespace {
bool would_block(const stamped_read& read) {
  return read.n < 0 && (read.err == EAGAIN || read.err == EWOULDBLOCK || read.err == EINTR);
}
}  // namespace

void downstream_session::on_request_bytes() {
  const auto read = read_into_buffer(read_chunk);
  if (would_block(read)) {
    do_wait_readable();
    return;
  }
  if (read.n <= 0) {  // EOF or reset
    do_close();
    return;
  }
  // When the bytes reached the host, on a new connection too: a connection opened ahead of its
  // first request (a client's warm pool) must not have its idle time charged to the request.
  // Without a stamp (stamping not yet on), a new connection's accept bounds it.
  const auto at = !read.stamp && fresh_ ? moment{connected_, connected_wall_} : received_at(read);
  arrival_ = at.steady;
  arrival_wall_ = at.wall;
  fresh_ = false;
  do_read_header();
}

// A request pipelined behind the one being answered: kept (up to pipeline_cap) and parsed once
// the response is done, its arrival being when its first bytes reached the host.
void downstream_session::on_pipelined_bytes() {
  const bool first = buffer_.size() == 0;
  const auto read = read_into_buffer(std::min(read_chunk, pipeline_cap - buffer_.size()));
  if (would_block(read)) {
    do_watch_read();
    return;
  }
  if (read.n <= 0) {  // EOF or reset: the client left
    do_close();
    return;
  }
  if (first) buffered_arrival_ = received_at(read);
  do_watch_read();
}

downstream_session::moment downstream_session::received_at(const stamped_read& read) {
  const auto steady_now = steady::now();
  const auto system_now = std::chrono::system_clock::now();
  if (!read.stamp) return {steady_now, system_now};
  const auto received = steady_from_stamp(*read.stamp, steady_now, system_now);
  return {received, system_now - std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                     steady_now - received)};
}

void downstream_session::on_lingering_bytes() {
  buffer_.consume(buffer_.size());
  const auto read = read_into_buffer(read_chunk);
  if (!would_block(read) && read.n <= 0) {
    do_close();
    return;
  }
  buffer_.consume(buffer_.size());
  do_wait_readable();
}

void downstream_session::do_read_header() {
  phase_ = phase::reading;
  // A head already in the buffer (the usual case: it came in the first read) is parsed here;
  // Beast's composed read would parse the same bytes and then post its completion through the
  // io queue (a queue trip per request).
  if (buffer_.size() > 0) {
    beast::error_code ec;
    put_head_buffered(*parser_, buffer_, ec);
    if (ec || parser_->is_header_done()) {
      on_read_header(ec, 0);
      return;
    }
  }
  arm_request_deadline();
  http::async_read_header(
      stream_, buffer_, *parser_,
      beast::bind_front_handler(&downstream_session::on_read_header, shared_from_this()));
}

// Armed only when the request must be waited for: a request that came whole (the usual case) is
// read without touching the timer.
void downstream_session::arm_request_deadline() {
  // The request deadline is ours, not the stream's: the stream would close the socket on expiry
  // and leave no way to answer 408.
  stream_.expires_never();
  arm_timer(timer_use::request_deadline, arrival_ + context_->limits.header_timeout);
}

void downstream_session::on_read_header(beast::error_code ec, std::size_t) {
  if (phase_ == phase::closed) return;
  if (ec || timed_out_) {
    on_read_error(ec);
    return;
  }
  switch (check_request_framing(*parser_, context_->limits.max_header_fields)) {
    case framing_fault::none:
      break;
    case framing_fault::too_many_fields:
      refuse(protocol_error::headers_too_large,
             "more than " + std::to_string(context_->limits.max_header_fields) + " header fields");
      return;
    case framing_fault::duplicate_content_length:
      refuse(protocol_error::malformed, "duplicate Content-Length");
      return;
    case framing_fault::length_and_encoding:
      refuse(protocol_error::malformed, "both Content-Length and Transfer-Encoding");
      return;
    case framing_fault::not_chunked:
      refuse(protocol_error::malformed, "Transfer-Encoding without final chunked");
      return;
  }
  if (parser_->is_done()) {
    dispatch_request();
    return;
  }
  if (parser_->expects_continue()) {
    do_write_continue();
    return;
  }
  // The body has usually come with the head: parsed here, it costs no further asynchronous read
  // of its own.
  if (buffer_.size() > 0) {
    parser_->eager(true);
    beast::error_code pec;
    put_buffered(*parser_, buffer_, pec);
    if (pec) {
      on_read_error(pec);
      return;
    }
    if (parser_->is_done()) {
      dispatch_request();
      return;
    }
  }
  do_read_body();
}

void downstream_session::do_write_continue() {
  arm_request_deadline();
  asio::async_write(
      stream_, asio::buffer(continue_response),
      beast::bind_front_handler(&downstream_session::on_write_continue, shared_from_this()));
}

void downstream_session::on_write_continue(beast::error_code ec, std::size_t) {
  if (phase_ == phase::closed) return;
  if (timed_out_) {
    do_write_timeout_response();
    return;
  }
  if (ec) {
    do_close();
    return;
  }
  do_read_body();
}

void downstream_session::do_read_body() {
  arm_request_deadline();
  http::async_read(
      stream_, buffer_, *parser_,
      beast::bind_front_handler(&downstream_session::on_read_body, shared_from_this()));
}

void downstream_session::on_read_body(beast::error_code ec, std::size_t) {
  if (phase_ == phase::closed) return;
  if (ec || timed_out_) {
    on_read_error(ec);
    return;
  }
  dispatch_request();
}

void downstream_session::on_read_error(beast::error_code ec) {
  // Only reached once a byte of the request arrived, so a timeout earns a 408.
  if (timed_out_ || ec == beast::error::timeout) {
    do_write_timeout_response();
    return;
  }
  if (ec.category() == http::make_error_code(http::error::end_of_stream).category()) {
    switch (static_cast<http::error>(ec.value())) {
      case http::error::end_of_stream:
      case http::error::partial_message:
        do_close();  // the client left mid-request
        return;
      case http::error::header_limit:
      case http::error::buffer_overflow:
        refuse(protocol_error::headers_too_large,
               "header over " + std::to_string(context_->limits.max_header_bytes) + " bytes");
        return;
      case http::error::body_limit:
        refuse(protocol_error::body_too_large,
               "body over " + std::to_string(context_->limits.max_request_bytes) + " bytes");
        return;
      default:
        refuse(protocol_error::malformed, ec.message());
        return;
    }
  }
  do_close();  // reset, aborted: nobody to answer
}

void downstream_session::do_write_timeout_response() {
  disarm_timer();
  phase_ = phase::lingering;
  asio::async_write(stream_, asio::buffer(timeout_response),
                    beast::bind_front_handler(&downstream_session::on_write_timeout_response,
                                              shared_from_this()));
}

void downstream_session::on_write_timeout_response(beast::error_code, std::size_t) {
  do_close();
}

incoming_request downstream_session::make_request(bool with_body) {
  incoming_request request;
  request.method = parser_->method_string();
  request.target = std::move(parser_->target());
  request.headers = std::move(parser_->headers());
  if (with_body) request.body = std::move(parser_->body());
  request.arrival = arrival_;
  request.arrival_wall = arrival_wall_;
  return request;
}

void downstream_session::dispatch_request() {
  http10_ = parser_->version() < 11;
  head_request_ = parser_->method() == http::verb::head;
  keep_alive_ = !http10_ && parser_->keep_alive() && !context_->draining;
  start_exchange(make_request(true));
}

void downstream_session::refuse(protocol_error error, std::string detail) {
  http10_ = parser_->version() < 11;
  head_request_ = false;
  keep_alive_ = false;  // the rest of the stream cannot be trusted to start at a request
  auto request = make_request(false);
  request.error = error;
  request.error_detail = std::move(detail);
  start_exchange(std::move(request));
}

// --- the exchange ------------------------------------------------------------------------------

void downstream_session::start_exchange(incoming_request request) {
  disarm_timer();
  stream_.expires_never();
  phase_ = phase::exchange;
  ++exchange_;
  response_started_ = false;
  streaming_ = false;
  response_complete_ = false;

  auto channel = std::make_shared<session_channel>(shared_from_this(), exchange_);
  std::shared_ptr<exchange_observer> observer;
  bool failed = false;
  const bool called = context_->with_owner([&] {
    try {
      observer = context_->handler(std::move(request), std::move(channel));
    } catch (...) {
      failed = true;
    }
  });
  if (!called || failed) {
    response_complete_ = true;  // nobody to tell
    do_close();
    return;
  }
  if (phase_ != phase::exchange) return;
  observer_ = std::move(observer);
  // Keep a read pending while the handler works: it is the only way to see the client leave.
  do_watch_read();
}

bool downstream_session::current(std::uint64_t exchange) const {
  return exchange == exchange_ && phase_ == phase::exchange && !response_complete_;
}

// Keeps the wait pending while the handler works: it is the only way to see the client leave.
void downstream_session::do_watch_read() {
  if (phase_ != phase::exchange || buffer_.size() >= pipeline_cap) return;
  do_wait_readable();
}

// The answer's calls run at once when made on this session's io thread (an actor on it
// answering): the bytes leave now, not behind every handler queued meanwhile, and a stream's
// event costs no pass through the io queue. An abort, made as a channel is dropped, is posted.
void downstream_session::post_send_full(std::uint64_t exchange, int status, header_list headers,
                                        std::string body) {
  queue_call({channel_call::kind::send_full, exchange, status, std::move(headers), std::move(body)},
             true);
}

void downstream_session::post_start_stream(std::uint64_t exchange, int status,
                                           header_list headers) {
  queue_call({channel_call::kind::start_stream, exchange, status, std::move(headers), {}}, true);
}

void downstream_session::post_send_chunk(std::uint64_t exchange, std::string data) {
  queue_call({channel_call::kind::chunk, exchange, 0, {}, std::move(data)}, true);
}

void downstream_session::post_end_stream(std::uint64_t exchange) {
  queue_call({channel_call::kind::end_stream, exchange, 0, {}, {}}, true);
}

void downstream_session::post_abort(std::uint64_t exchange) {
  queue_call({channel_call::kind::abort, exchange, 0, {}, {}});
}

void downstream_session::queue_call(channel_call call, bool at_once) {
  // On the session's own thread with no run under way, the call is carried out here, in order,
  // without passing through the queue.
  if (at_once && executor_.running_in_this_thread()) {
    {
      std::lock_guard lock(calls_mutex_);
      if (calls_scheduled_) {
        calls_.push_back(std::move(call));
        return;
      }
      calls_scheduled_ = true;
    }
    run_call(call);
    run_calls();  // what came meanwhile; it clears calls_scheduled_
    return;
  }
  {
    std::lock_guard lock(calls_mutex_);
    calls_.push_back(std::move(call));
    if (calls_scheduled_) return;  // the run already under way or posted takes it, in order
    calls_scheduled_ = true;
  }
  if (at_once) {
    asio::dispatch(executor_, [self = shared_from_this()] { self->run_calls(); });
  } else {
    asio::post(executor_, [self = shared_from_this()] { self->run_calls(); });
  }
}

void downstream_session::run_calls() {
  for (;;) {
    {
      std::lock_guard lock(calls_mutex_);
      if (calls_.empty()) {
        calls_scheduled_ = false;
        return;
      }
      running_calls_.swap(calls_);
    }
    // Not under the mutex: a call may lead to more (a pipelined request answered at once),
    // which queue behind these.
    for (auto& call : running_calls_) run_call(call);
    running_calls_.clear();
  }
}

void downstream_session::run_call(channel_call& call) {
  if (!current(call.exchange)) return;
  switch (call.what) {
    case channel_call::kind::send_full:
      return send_full(call.status, std::move(call.headers), std::move(call.data));
    case channel_call::kind::start_stream:
      return start_stream(call.status, std::move(call.headers));
    case channel_call::kind::chunk:
      return send_chunk(std::move(call.data));
    case channel_call::kind::end_stream:
      return end_stream();
    case channel_call::kind::abort:
      response_complete_ = true;  // the handler gave up: not a client that left
      return do_close();
  }
}

void downstream_session::send_full(int status, header_list headers, std::string body) {
  if (response_started_) return;  // a second response to one request: ignored
  status = sane_status(status);
  response_started_ = true;
  response_complete_ = true;
  keep_alive_ = keep_alive_ && !context_->draining;
  const bool bodyless = has_no_body(status);
  const auto framing =
      bodyless ? body_framing{} : body_framing{body_framing::kind::length, body.size()};
  write_queue_.push_back(serialize_head(status, headers, framing, keep_alive_));
  if (!bodyless && !head_request_ && !body.empty()) write_queue_.push_back(std::move(body));
  do_write();
}

void downstream_session::start_stream(int status, header_list headers) {
  if (response_started_) return;
  status = sane_status(status);
  response_started_ = true;
  streaming_ = true;
  keep_alive_ = keep_alive_ && !context_->draining;
  // An HTTP/1.0 client knows no chunked encoding: its stream ends with the connection.
  const auto framing = http10_ ? body_framing{} : body_framing{body_framing::kind::chunked};
  write_queue_.push_back(serialize_head(status, headers, framing, keep_alive_));
  do_write();
}

void downstream_session::send_chunk(std::string data) {
  // An empty chunk would end the stream.
  if (!streaming_ || data.empty() || head_request_) return;
  if (http10_) {
    write_queue_.push_back(std::move(data));
  } else {
    write_queue_.push_back(chunk_head(data.size()));
    write_queue_.push_back(std::move(data));
    write_queue_.emplace_back("\r\n");
  }
  do_write();
}

void downstream_session::end_stream() {
  if (!streaming_) return;
  response_complete_ = true;
  if (!http10_ && !head_request_) write_queue_.push_back("0\r\n\r\n");
  do_write();
}

// What is queued goes out in gathered writes, in order, tried at once on the non-blocking
// socket: a response usually fits the socket's buffer, and then it costs no asynchronous
// operation, no completion through the io queue and no stall timer. Only what the socket cannot
// take now waits for an asynchronous write_some — write_some, not write: a client that stops
// reading must not hold the session (and the upstream work behind it) forever, so the stall timer
// measures the time without progress, not the time of a large body.
void downstream_session::do_write() {
  if (writing_ || phase_ == phase::closed) return;
  write_buffers buffers;
  while (!write_queue_.empty()) {
    gather_writes(buffers);
    beast::error_code ec;
    const auto n = stream_.socket().write_some(buffers, ec);
    if (ec) {
      if (ec == asio::error::would_block || ec == asio::error::try_again) break;
      do_close();
      return;
    }
    consume_written(n);
    if (n < asio::buffer_size(buffers)) break;  // the socket's buffer is full
  }
  if (write_queue_.empty()) {
    if (phase_ == phase::exchange && response_complete_) on_exchange_done();
    return;
  }
  gather_writes(buffers);
  writing_ = true;
  arm_timer(timer_use::write_stall, steady::now() + context_->limits.keepalive_timeout);
  stream_.socket().async_write_some(
      buffers, beast::bind_front_handler(&downstream_session::on_write, shared_from_this()));
}

void downstream_session::gather_writes(write_buffers& buffers) const {
  buffers.clear();
  for (const auto& item : write_queue_) {
    if (buffers.size() == max_gather) break;
    buffers.emplace_back(asio::buffer(item) + (buffers.empty() ? write_offset_ : 0));
  }
}

void downstream_session::consume_written(std::size_t n) {
  while (n > 0) {
    const auto left = write_queue_.front().size() - write_offset_;
    if (n < left) {
      write_offset_ += n;
      break;
    }
    n -= left;
    write_offset_ = 0;
    write_queue_.pop_front();
  }
}

void downstream_session::on_write(beast::error_code ec, std::size_t n) {
  writing_ = false;
  if (phase_ == phase::closed) return;
  disarm_timer();
  if (ec) {
    do_close();
    return;
  }
  consume_written(n);
  do_write();
}

void downstream_session::on_exchange_done() {
  observer_.reset();
  if (!keep_alive_ || context_->draining) {
    do_linger();
    return;
  }
  // A pipelined request goes on from the io queue: answered at once (a refusal, say), it would
  // otherwise recurse through the synchronous write, one level per request in the buffer.
  if (buffer_.size() > 0) {
    phase_ = phase::reading;  // a wait completing meanwhile is dropped: it consumed nothing
    asio::post(executor_, [self = shared_from_this()] { self->do_wait_request(); });
    return;
  }
  do_wait_request();
}

// --- closing -----------------------------------------------------------------------------------

void downstream_session::do_linger() {
  phase_ = phase::lingering;
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  arm_timer(timer_use::linger,
            steady::now() + std::min<std::chrono::milliseconds>(linger_timeout,
                                                                context_->limits.header_timeout));
  buffer_.consume(buffer_.size());
  do_wait_readable();
}

void downstream_session::do_close() {
  if (phase_ == phase::closed) return;
  const bool client_gone = phase_ == phase::exchange && !response_complete_;
  phase_ = phase::closed;
  // The handler hears first that the caller left; closing this socket, already abandoned by
  // its client, can wait.
  auto observer = std::move(observer_);
  if (client_gone && observer) context_->with_owner([&] { observer->on_client_gone(); });
  disarm_timer();
  timer_.cancel();  // its pending wait holds this session
  stream_.close();
  if (registered_) {
    context_->sessions.remove(this);
    registered_ = false;
  }
}

// --- the one timer -----------------------------------------------------------------------------

// The timer is lazy: arming records the due time and starts a wait only if none is pending
// that wakes up no later; disarming only forgets the due time. A wait that wakes up early (the
// previous idle timeout, say) re-arms for what is due then. A kept-alive connection thus arms and
// cancels no Asio timer per request (each did cost a heap operation under the reactor's lock, a
// timerfd update and the aborted wait's completion through the io queue).
void downstream_session::arm_timer(timer_use use, steady::time_point at) {
  timer_use_ = use;
  timer_due_ = at;
  wait_until(at);
}

void downstream_session::wait_until(steady::time_point at) {
  if (timer_waiting_ && timer_wait_at_ <= at) return;
  start_timer_wait(at);
}

void downstream_session::start_timer_wait(steady::time_point at) {
  const auto serial = ++timer_serial_;  // a wait this one replaces is stale when it completes
  timer_waiting_ = true;
  timer_wait_at_ = at;
  timer_.expires_at(at);
  timer_.async_wait(
      [self = shared_from_this(), serial](beast::error_code ec) { self->on_timer(ec, serial); });
}

void downstream_session::disarm_timer() {
  timer_due_ = steady::time_point::max();
}

void downstream_session::on_timer(beast::error_code ec, std::uint64_t serial) {
  if (serial != timer_serial_) return;
  timer_waiting_ = false;
  if (ec || phase_ == phase::closed) return;
  const auto now = steady::now();
  if (timer_due_ <= now) {
    const auto use = timer_use_;
    timer_due_ = steady::time_point::max();
    on_timer_use_due(use);
    if (phase_ == phase::closed) return;
  }
  if (timer_due_ != steady::time_point::max()) wait_until(timer_due_);
}

void downstream_session::on_timer_use_due(timer_use use) {
  switch (use) {
    case timer_use::request_deadline: {
      if (phase_ != phase::reading) return;
      // Cancel aborts the pending read; shutting the receive side makes a read that was between
      // two steps of Beast's composed operation fail too, instead of escaping the deadline.
      timed_out_ = true;
      beast::error_code ignored;
      stream_.socket().cancel(ignored);
      stream_.socket().shutdown(tcp::socket::shutdown_receive, ignored);
      return;
    }
    case timer_use::idle:
      if (phase_ == phase::waiting) do_close();
      return;
    case timer_use::write_stall:
    case timer_use::linger:
      do_close();
      return;
  }
}

}  // namespace tether::net
