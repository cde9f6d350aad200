#include "bench/bench/client_connection.hpp"

#include <cerrno>
#include <cstring>

#include <boost/asio/connect.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>

#include "net/buffered_parse.hpp"
#include "net/receive_stamp.hpp"

namespace tether::bench {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

}  // namespace

double ms_between(steady::time_point from, steady::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

double epoch_ms_now() {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                std::chrono::system_clock::now().time_since_epoch())
                .count();
  return static_cast<double>(us) / 1000.0;
}

std::shared_ptr<const std::string> make_request(const std::string& host, const std::string& path,
                                                const std::string& body,
                                                const std::vector<std::string>& extra_headers) {
  std::string out =
      "POST " + path + " HTTP/1.1\r\nhost: " + host +
      "\r\ncontent-type: application/json\r\ncontent-length: " + std::to_string(body.size()) +
      "\r\n";
  for (const auto& h : extra_headers) out.append(h).append("\r\n");
  out.append("\r\n").append(body);
  return std::make_shared<const std::string>(std::move(out));
}

std::string chat_body(const std::string& model, bool stream) {
  return R"({"model":")" + model + R"(","stream":)" + (stream ? "true" : "false") +
         R"(,"messages":[{"role":"user","content":"Say hello in one short sentence."}]})";
}

struct client_connection::state {
  state(asio::io_context& ioc, tcp::endpoint t) : socket(ioc), target(t) {}

  tcp::socket socket;
  tcp::endpoint target;
  beast::flat_buffer buffer;
  std::optional<http::response_parser<http::string_body>> parser;
  std::shared_ptr<const std::string> request;
  done_fn done;
  std::function<void()> first_event;
  event_fn each_event;
  // Handlers of an aborted exchange may still run after the next one started: they carry the
  // generation they belong to and are ignored when it is over.
  std::uint64_t generation = 0;
  bool busy = false;
  steady::time_point sent;
  exchange_result result;
  std::string pending_event;  // SSE bytes of an event not yet ended by a blank line
  bool is_stream = false;
  bool stamp_arrivals = false;
  char peek_byte = 0;
};

client_connection::client_connection(asio::io_context& ioc, tcp::endpoint target)
    : st_(std::make_unique<state>(ioc, target)) {}

client_connection::~client_connection() = default;

bool client_connection::busy() const {
  return st_->busy;
}

std::size_t client_connection::events_seen() const {
  return st_->result.event_ms.size();
}

void client_connection::stamp_arrivals() {
  st_->stamp_arrivals = true;
  if (st_->socket.is_open()) net::enable_receive_stamps(st_->socket.native_handle());
}

void client_connection::on_first_event(std::function<void()> fn) {
  st_->first_event = std::move(fn);
}

void client_connection::on_event(event_fn fn) {
  st_->each_event = std::move(fn);
}

double client_connection::abort() {
  double at = epoch_ms_now();
  ++st_->generation;
  st_->busy = false;
  st_->done = nullptr;
  st_->first_event = nullptr;
  error_code ignored;
  st_->socket.close(ignored);
  return at;
}

void client_connection::exchange(std::shared_ptr<const std::string> request, done_fn on_done) {
  auto& st = *st_;
  const auto gen = ++st.generation;
  st.busy = true;
  st.request = std::move(request);
  st.done = std::move(on_done);
  st.result = exchange_result{};
  st.pending_event.clear();
  st.is_stream = false;
  st.sent = steady::now();
  st.result.sent_epoch_ms = epoch_ms_now();

  if (st.socket.is_open()) return do_write(gen);
  st.buffer.clear();
  st.socket.async_connect(st.target, [self = shared_from_this(), gen](error_code ec) {
    auto& s = *self->st_;
    if (s.generation != gen) return;
    if (ec) return self->finish(gen, false, "connect: " + ec.message());
    error_code ignored;
    s.socket.set_option(tcp::no_delay(true), ignored);
    if (s.stamp_arrivals) net::enable_receive_stamps(s.socket.native_handle());
    self->do_write(gen);
  });
}

void client_connection::do_write(std::uint64_t gen) {
  auto& st = *st_;
  asio::async_write(st.socket, asio::buffer(*st.request),
                    [self = shared_from_this(), gen](error_code ec, std::size_t) {
                      auto& s = *self->st_;
                      if (s.generation != gen) return;
                      if (ec) return self->finish(gen, false, ec.message());
                      s.parser.emplace();
                      s.parser->body_limit(64 * 1024 * 1024);
                      self->do_read(gen);
                    });
}

void client_connection::do_read(std::uint64_t gen) {
  auto& st = *st_;
  if (st.stamp_arrivals) {
    // A peek waits for bytes (tried at once, unlike async_wait); recvmsg then takes them with
    // their timestamp.
    st.socket.async_receive(asio::buffer(&st.peek_byte, 1), tcp::socket::message_peek,
                            [self = shared_from_this(), gen](error_code ec, std::size_t) {
                              self->on_readable(gen, ec);
                            });
    return;
  }
  http::async_read_some(
      st.socket, st.buffer, *st.parser,
      [self = shared_from_this(), gen](error_code ec, std::size_t) { self->on_read(gen, ec); });
}

void client_connection::on_readable(std::uint64_t gen, error_code ec) {
  auto& s = *st_;
  if (s.generation != gen) return;
  if (ec) return finish(gen, false, ec.message());
  auto space = s.buffer.prepare(64 * 1024);
  const auto read = net::read_stamped(s.socket.native_handle(), space.data(), space.size());
  if (read.n < 0 && (read.err == EAGAIN || read.err == EWOULDBLOCK || read.err == EINTR))
    return do_read(gen);
  if (read.n < 0) return finish(gen, false, std::strerror(read.err));
  error_code pec;
  if (read.n == 0) {
    if (!s.parser->need_eof()) return finish(gen, false, "end of stream");
    s.parser->put_eof(pec);
  } else {
    s.buffer.commit(static_cast<std::size_t>(read.n));
    s.parser->eager(true);  // past the head in the same call: the rest is not in the socket
    net::put_buffered(*s.parser, s.buffer, pec);
  }
  if (read.stamp) {
    const auto arrived =
        net::steady_from_stamp(*read.stamp, steady::now(), std::chrono::system_clock::now());
    s.result.arrived_ms = ms_between(s.sent, arrived);
  }
  on_read(gen, pec);
}

// Every completion records what arrived at that instant.
void client_connection::on_read(std::uint64_t gen, error_code ec) {
  auto& s = *st_;
  if (s.generation != gen) return;
  if (ec) return finish(gen, false, ec.message());
  auto now = steady::now();
  if (!s.result.head_ms && s.parser->is_header_done()) {
    s.result.head_ms = ms_between(s.sent, now);
    s.result.status = s.parser->get().result_int();
    s.is_stream = s.parser->get()[http::field::content_type].starts_with("text/event-stream");
  }
  auto& body = s.parser->get().body();
  // Events end with a blank line; [DONE] is the protocol's terminator, not work: not counted.
  if (s.is_stream) {
    // One clock reading per read, only for a caller that wants it.
    const double read_epoch = s.each_event && !body.empty() ? epoch_ms_now() : 0;
    for (char c : body) {
      s.pending_event.push_back(c);
      auto n = s.pending_event.size();
      if (n < 2 || s.pending_event[n - 1] != '\n' || s.pending_event[n - 2] != '\n') continue;
      if (s.pending_event.rfind("data: [DONE]", 0) != 0) {
        s.result.event_ms.push_back(ms_between(s.sent, now));
        if (s.each_event) s.each_event(s.pending_event, read_epoch);
        if (s.result.event_ms.size() == 1 && s.first_event) {
          auto fn = std::move(s.first_event);
          s.first_event = nullptr;
          fn();
          if (s.generation != gen) return;  // the callback aborted this exchange
        }
      }
      s.pending_event.clear();
    }
  }
  body.clear();
  if (s.parser->is_done()) {
    if (!s.parser->get().keep_alive()) {
      error_code ignored;
      s.socket.close(ignored);
    }
    return finish(gen, true, {});
  }
  do_read(gen);
}

void client_connection::finish(std::uint64_t gen, bool ok, std::string error) {
  auto& s = *st_;
  if (s.generation != gen) return;
  s.result.ok = ok;
  s.result.error = std::move(error);
  s.result.latency_ms = ms_between(s.sent, steady::now());
  if (!ok) {
    error_code ignored;
    s.socket.close(ignored);
  }
  s.busy = false;
  s.first_event = nullptr;
  auto done = std::move(s.done);
  s.done = nullptr;
  if (done) done(s.result);
}

}  // namespace tether::bench
