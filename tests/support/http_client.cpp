// Blocking calls on top of asynchronous Beast/Asio: each call starts its operations on a private
// io_context and runs it until they finish or the deadline passes, then cancels and drains.
// That is what makes every wait bounded without closing sockets a test still wants to use.
#include "tests/support/http_client.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cctype>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

namespace tether::test {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;
using tls_stream = asio::ssl::stream<tcp::socket>;

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

const std::string* find_in(const header_map& headers, std::string_view name) {
  auto wanted = lower(name);
  for (const auto& [n, v] : headers) {
    if (n == wanted) return &v;
  }
  return nullptr;
}

template <class Fields>
header_map collect_headers(const Fields& fields) {
  header_map out;
  for (const auto& field : fields) {
    out.emplace_back(lower(field.name_string()), std::string(field.value()));
  }
  return out;
}

tcp::socket& socket_of(tcp::socket& s) {
  return s;
}
tcp::socket& socket_of(tls_stream& s) {
  return s.next_layer();
}

// Runs `io` until *done or the deadline. On the deadline, `cancel` aborts what is pending and the
// aborted handlers are drained, so nothing refers to the caller's stack afterwards.
bool run_until(asio::io_context& io, const bool& done, test_clock::time_point deadline,
               const std::function<void()>& cancel) {
  io.restart();
  while (!done) {
    if (io.run_one_until(deadline) == 0) break;
  }
  if (done) return true;
  cancel();
  io.restart();
  io.run();
  return false;
}

void connect_socket(asio::io_context& io, tcp::socket& socket, std::uint16_t port,
                    test_clock::time_point deadline) {
  bool done = false;
  error_code result;
  socket.async_connect(tcp::endpoint(asio::ip::address_v4::loopback(), port), [&](error_code ec) {
    result = ec;
    done = true;
  });
  error_code ignored;
  if (!run_until(io, done, deadline, [&] { socket.close(ignored); })) {
    throw http_error("connect to 127.0.0.1:" + std::to_string(port) + " timed out", true);
  }
  if (result) {
    throw http_error("connect to 127.0.0.1:" + std::to_string(port) + ": " + result.message(),
                     false);
  }
  socket.set_option(tcp::no_delay(true), ignored);
}

http::request<http::string_body> make_request(std::string_view method, std::uint16_t port,
                                              std::string_view target, std::string_view body,
                                              const header_map& headers) {
  http::request<http::string_body> request;
  auto verb = http::string_to_verb(method);
  if (verb == http::verb::unknown) {
    request.method_string(method);
  } else {
    request.method(verb);
  }
  request.target(target);
  request.version(11);
  request.set(http::field::host, "127.0.0.1:" + std::to_string(port));
  request.set(http::field::user_agent, "tether-test");
  bool has_content_type = false;
  for (const auto& [name, value] : headers) {
    request.insert(name, value);
    if (lower(name) == "content-type") has_content_type = true;
  }
  if (!body.empty() && !has_content_type)
    request.set(http::field::content_type, "application/json");
  request.body() = std::string(body);
  request.prepare_payload();
  return request;
}

}  // namespace

const std::string* http_response::header(std::string_view name) const {
  return find_in(headers, name);
}

boost::json::value http_response::json() const {
  return boost::json::parse(body);
}

// ---- http_connection -----------------------------------------------------------------------

struct http_connection::impl {
  virtual ~impl() = default;
  virtual http_response request(std::string_view method, std::string_view target,
                                std::string_view body, const header_map& headers,
                                std::chrono::milliseconds timeout) = 0;
  virtual bool is_open() const = 0;
  virtual void close() = 0;
};

namespace {

template <class Stream>
class connection_impl : public http_connection::impl {
 public:
  connection_impl(std::uint16_t port, std::chrono::milliseconds timeout)
      : port_(port), tls_context_(asio::ssl::context::tls_client), stream_(make_stream()) {
    const auto deadline = test_clock::now() + timeout;
    connect_socket(io_, socket_of(stream_), port, deadline);
    if constexpr (std::is_same_v<Stream, tls_stream>) {
      bool done = false;
      error_code result;
      stream_.async_handshake(asio::ssl::stream_base::client, [&](error_code ec) {
        result = ec;
        done = true;
      });
      if (!run_until(io_, done, deadline, [&] { close(); })) {
        throw http_error("TLS handshake timed out", true);
      }
      if (result) throw http_error("TLS handshake: " + result.message(), false);
    }
    open_ = true;
  }

  ~connection_impl() override { close(); }

  http_response request(std::string_view method, std::string_view target, std::string_view body,
                        const header_map& headers, std::chrono::milliseconds timeout) override {
    if (!open_) throw http_error("connection is closed", false);
    const auto deadline = test_clock::now() + timeout;
    const auto started = test_clock::now();
    auto request = make_request(method, port_, target, body, headers);

    http::response_parser<http::string_body> parser;
    parser.body_limit(boost::none);
    parser.header_limit(1024 * 1024);
    bool done = false;
    error_code result;
    http::async_write(stream_, request, [&](error_code ec, std::size_t) {
      if (ec) {
        result = ec;
        done = true;
        return;
      }
      http::async_read(stream_, buffer_, parser, [&](error_code read_ec, std::size_t) {
        result = read_ec;
        done = true;
      });
    });
    if (!run_until(io_, done, deadline, [&] { close(); })) {
      throw http_error(std::string(method) + " " + std::string(target) + " timed out", true);
    }
    if (result) {
      close();
      throw http_error(std::string(method) + " " + std::string(target) + ": " + result.message(),
                       false);
    }
    http_response response;
    response.elapsed = test_clock::now() - started;
    auto message = parser.release();
    response.status = static_cast<int>(message.result_int());
    response.headers = collect_headers(message.base());
    response.body = std::move(message.body());
    if (!message.keep_alive()) close();
    return response;
  }

  bool is_open() const override { return open_; }

  void close() override {
    open_ = false;
    error_code ignored;
    socket_of(stream_).close(ignored);
  }

 private:
  Stream make_stream() {
    if constexpr (std::is_same_v<Stream, tls_stream>) {
      tls_context_.set_verify_mode(asio::ssl::verify_none);
      return Stream(io_, tls_context_);
    } else {
      return Stream(io_);
    }
  }

  std::uint16_t port_;
  asio::io_context io_{1};
  asio::ssl::context tls_context_;
  Stream stream_;
  beast::flat_buffer buffer_;
  bool open_ = false;
};

}  // namespace

http_connection::http_connection(std::uint16_t port, std::chrono::milliseconds timeout, bool tls) {
  if (tls) {
    impl_ = std::make_unique<connection_impl<tls_stream>>(port, timeout);
  } else {
    impl_ = std::make_unique<connection_impl<tcp::socket>>(port, timeout);
  }
}

http_connection::~http_connection() = default;

http_response http_connection::request(std::string_view method, std::string_view target,
                                       std::string_view body, const header_map& headers,
                                       std::chrono::milliseconds timeout) {
  return impl_->request(method, target, body, headers, timeout);
}

bool http_connection::is_open() const {
  return impl_->is_open();
}
void http_connection::close() {
  impl_->close();
}

http_response request(std::string_view method, std::uint16_t port, std::string_view target,
                      std::string_view body, const header_map& headers,
                      std::chrono::milliseconds timeout) {
  const auto started = test_clock::now();
  http_connection connection(port, timeout);
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(timeout -
                                                                    (test_clock::now() - started));
  return connection.request(method, target, body, headers,
                            std::max(left, std::chrono::milliseconds(1)));
}

http_response https_request(std::string_view method, std::uint16_t port, std::string_view target,
                            std::string_view body, const header_map& headers,
                            std::chrono::milliseconds timeout) {
  const auto started = test_clock::now();
  http_connection connection(port, timeout, true);
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(timeout -
                                                                    (test_clock::now() - started));
  return connection.request(method, target, body, headers,
                            std::max(left, std::chrono::milliseconds(1)));
}

// ---- stream_request ------------------------------------------------------------------------

const std::string* stream_result::header(std::string_view name) const {
  return find_in(headers, name);
}

namespace {

// Calls fn(event_text, end_offset) for each complete SSE event ("...\n\n") in body.
template <class Fn>
void for_each_sse_event(const std::string& body, Fn fn) {
  std::size_t start = 0;
  while (true) {
    auto end = body.find("\n\n", start);
    if (end == std::string::npos) return;
    fn(std::string_view(body).substr(start, end - start), end + 2);
    start = end + 2;
  }
}

}  // namespace

std::vector<stream_result::sse_event> stream_result::sse_events() const {
  std::vector<sse_event> out;
  for_each_sse_event(body, [&](std::string_view event, std::size_t) {
    sse_event e;
    bool any = false;
    while (!event.empty()) {
      auto nl = event.find('\n');
      auto line = event.substr(0, nl);
      event = nl == std::string_view::npos ? std::string_view{} : event.substr(nl + 1);
      auto field_value = [&](std::string_view field) {
        line.remove_prefix(field.size());
        if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
        return line;
      };
      if (line.substr(0, 6) == "event:") {
        e.name = std::string(field_value("event:"));
        continue;
      }
      if (line.substr(0, 5) != "data:") continue;
      auto value = field_value("data:");
      if (any) e.data.push_back('\n');
      e.data.append(value);
      any = true;
    }
    if (any) out.push_back(std::move(e));
  });
  return out;
}

std::vector<std::string> stream_result::sse_data() const {
  std::vector<std::string> out;
  for (auto& e : sse_events()) out.push_back(std::move(e.data));
  return out;
}

std::vector<test_clock::time_point> stream_result::sse_event_times() const {
  std::vector<test_clock::time_point> out;
  for_each_sse_event(body, [&](std::string_view, std::size_t end_offset) {
    std::size_t offset = 0;
    for (const auto& piece : pieces) {
      offset += piece.bytes.size();
      if (offset >= end_offset) {
        out.push_back(piece.at);
        return;
      }
    }
  });
  return out;
}

stream_result stream_request(std::string_view method, std::uint16_t port, std::string_view target,
                             std::string_view body, const header_map& headers,
                             const stream_options& options) {
  asio::io_context io(1);
  tcp::socket socket(io);
  const auto deadline = test_clock::now() + options.timeout;
  connect_socket(io, socket, port, deadline);

  stream_result result;
  auto request = make_request(method, port, target, body, headers);
  bool done = false;
  error_code write_error;
  asio::steady_timer close_timer(io);
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);
  char piece_buffer[16 * 1024];

  auto stop = [&](stream_end how) {
    if (done) return;
    result.end = how;
    result.ended_at = test_clock::now();
    done = true;
    close_timer.cancel();
    error_code ignored;
    if (how == stream_end::stopped && options.reset) {
      socket.set_option(asio::socket_base::linger(true, 0), ignored);
    }
    socket.close(ignored);
  };

  std::function<void()> read_body;
  auto on_body = [&](error_code ec, std::size_t) {
    if (done) return;
    if (ec == http::error::need_buffer) ec = {};
    auto got = sizeof piece_buffer - parser.get().body().size;
    if (got > 0) {
      stream_piece piece{std::string(piece_buffer, got), test_clock::now()};
      result.body.append(piece.bytes);
      result.pieces.push_back(piece);
      bool keep_going = !options.on_piece || options.on_piece(result.pieces.back());
      if (!keep_going ||
          (options.close_after_bytes && result.body.size() >= *options.close_after_bytes)) {
        return stop(stream_end::stopped);
      }
    }
    if (parser.is_done()) return stop(stream_end::complete);
    if (ec) return stop(stream_end::server_closed);
    read_body();
  };
  read_body = [&] {
    parser.get().body().data = piece_buffer;
    parser.get().body().size = sizeof piece_buffer;
    http::async_read_some(socket, buffer, parser, on_body);
  };

  http::async_write(socket, request, [&](error_code ec, std::size_t) {
    if (ec) {
      write_error = ec;
      done = true;
      return;
    }
    result.sent_at = test_clock::now();
    if (options.close_after) {
      close_timer.expires_after(*options.close_after);
      close_timer.async_wait([&](error_code wait_ec) {
        if (!wait_ec) stop(stream_end::stopped);
      });
    }
    if (options.close_after_bytes && *options.close_after_bytes == 0) {
      return stop(stream_end::stopped);
    }
    http::async_read_header(socket, buffer, parser, [&](error_code read_ec, std::size_t) {
      if (done) return;
      if (read_ec) return stop(stream_end::server_closed);
      result.head_at = test_clock::now();
      result.status = static_cast<int>(parser.get().result_int());
      result.headers = collect_headers(parser.get().base());
      if (parser.is_done()) return stop(stream_end::complete);
      read_body();
    });
  });

  if (!run_until(io, done, deadline, [&] { stop(stream_end::timed_out); })) {
    result.end = stream_end::timed_out;
  }
  if (write_error) throw http_error("writing the request: " + write_error.message(), false);
  return result;
}

// ---- raw_connection --------------------------------------------------------------------------

struct raw_connection::impl {
  asio::io_context io{1};
  tcp::socket socket{io};
  bool peer_closed = false;

  // One read of whatever is available; "" on EOF/error (peer_closed set) or timeout.
  std::string read_once(test_clock::time_point deadline) {
    if (peer_closed || !socket.is_open()) return {};
    char buffer[16 * 1024];
    bool done = false;
    std::size_t got = 0;
    socket.async_read_some(asio::buffer(buffer), [&](error_code ec, std::size_t n) {
      got = n;
      if (ec && ec != asio::error::operation_aborted) peer_closed = true;
      done = true;
    });
    error_code ignored;
    run_until(io, done, deadline, [&] { socket.cancel(ignored); });
    return std::string(buffer, got);
  }
};

raw_connection::raw_connection(std::uint16_t port, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<impl>()) {
  connect_socket(impl_->io, impl_->socket, port, test_clock::now() + timeout);
}

raw_connection::~raw_connection() {
  close();
}

void raw_connection::send(std::string_view bytes, std::chrono::milliseconds timeout) {
  bool done = false;
  error_code result;
  asio::async_write(impl_->socket, asio::buffer(bytes.data(), bytes.size()),
                    [&](error_code ec, std::size_t) {
                      result = ec;
                      done = true;
                    });
  error_code ignored;
  if (!run_until(impl_->io, done, test_clock::now() + timeout,
                 [&] { impl_->socket.cancel(ignored); })) {
    throw http_error("raw send timed out", true);
  }
  if (result) throw http_error("raw send: " + result.message(), false);
}

std::string raw_connection::read_some(std::chrono::milliseconds timeout) {
  return impl_->read_once(test_clock::now() + timeout);
}

std::string raw_connection::read_until(std::string_view marker, std::chrono::milliseconds timeout) {
  const auto deadline = test_clock::now() + timeout;
  std::string out;
  while (out.find(marker) == std::string::npos && !impl_->peer_closed &&
         test_clock::now() < deadline) {
    out += impl_->read_once(deadline);
  }
  return out;
}

std::string raw_connection::read_until_closed(std::chrono::milliseconds timeout) {
  const auto deadline = test_clock::now() + timeout;
  std::string out;
  while (!impl_->peer_closed && impl_->socket.is_open() && test_clock::now() < deadline) {
    out += impl_->read_once(deadline);
  }
  return out;
}

bool raw_connection::peer_closed() const {
  return impl_->peer_closed;
}

bool raw_connection::wait_closed(std::chrono::milliseconds timeout) {
  read_until_closed(timeout);
  return impl_->peer_closed;
}

void raw_connection::close(bool reset) {
  error_code ignored;
  if (!impl_->socket.is_open()) return;
  if (reset) impl_->socket.set_option(asio::socket_base::linger(true, 0), ignored);
  impl_->socket.close(ignored);
}

}  // namespace tether::test
