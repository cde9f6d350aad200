// upstream_client against small servers on 127.0.0.1: each server runs a blocking script per
// accepted connection in its own thread, so a test can say exactly what the upstream does and when.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "net/connection_affinity.hpp"
#include "net/io_group.hpp"
#include "net/io_runtime.hpp"
#include "net/upstream.hpp"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using namespace std::chrono_literals;
using testing::ElementsAre;
using testing::ElementsAreArray;
using testing::HasSubstr;
using tether::net::header_list;
using tether::net::upstream_client;
using tether::net::upstream_endpoint;
using tether::net::upstream_failure;
using tether::net::upstream_request;

constexpr auto wait_limit = 5s;

// --- the client's side: what a caller of upstream_client observes ---------------------------

class recorder : public tether::net::upstream_events {
 public:
  void on_connected(bool reused) override { push(reused ? "connected:reused" : "connected:new"); }
  void on_head(int status, header_list headers) override {
    std::lock_guard lock(mutex_);
    status_ = status;
    headers_ = std::move(headers);
    log_.push_back("head:" + std::to_string(status));
    changed_.notify_all();
  }
  void on_body(std::string bytes) override {
    {
      std::lock_guard lock(mutex_);
      body_ += bytes;
      pieces_.push_back(bytes);
      if (log_.empty() || log_.back() != "body") log_.push_back("body");
      changed_.notify_all();
    }
    if (on_body_hook) on_body_hook(bytes);
  }
  void on_end() override { push("end"); }
  void on_failure(upstream_failure kind, std::string message) override {
    std::lock_guard lock(mutex_);
    failure_ = kind;
    failure_message_ = std::move(message);
    log_.push_back("failure");
    changed_.notify_all();
  }
  void on_closed() override {
    std::lock_guard lock(mutex_);
    ++closed_;
    log_.push_back("closed");
    changed_.notify_all();
  }

  bool wait_closed(std::chrono::milliseconds limit = wait_limit) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, limit, [&] { return closed_ > 0; });
  }

  std::vector<std::string> log() const {
    std::lock_guard lock(mutex_);
    return log_;
  }
  std::string body() const {
    std::lock_guard lock(mutex_);
    return body_;
  }
  std::vector<std::string> pieces() const {
    std::lock_guard lock(mutex_);
    return pieces_;
  }
  std::optional<upstream_failure> failure() const {
    std::lock_guard lock(mutex_);
    return failure_;
  }
  std::string failure_message() const {
    std::lock_guard lock(mutex_);
    return failure_message_;
  }
  header_list headers() const {
    std::lock_guard lock(mutex_);
    return headers_;
  }
  int closed_count() const {
    std::lock_guard lock(mutex_);
    return closed_;
  }

  std::function<void(const std::string&)> on_body_hook;

 private:
  void push(std::string entry) {
    std::lock_guard lock(mutex_);
    log_.push_back(std::move(entry));
    changed_.notify_all();
  }

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::string> log_;
  int status_ = 0;
  header_list headers_;
  std::string body_;
  std::vector<std::string> pieces_;
  std::optional<upstream_failure> failure_;
  std::string failure_message_;
  int closed_ = 0;
};

const std::string* header(const header_list& headers, const std::string& name) {
  for (const auto& h : headers)
    if (h.name == name) return &h.value;
  return nullptr;
}

upstream_endpoint local_endpoint(std::uint16_t port, std::string host = "127.0.0.1") {
  upstream_endpoint ep;
  ep.host = std::move(host);
  ep.port = port;
  ep.connect_timeout = 2000ms;
  return ep;
}

upstream_request simple_request(std::string body = "{\"a\":1}") {
  upstream_request r;
  r.method = "POST";
  r.target = "/v1/chat/completions";
  r.headers = {{"x-request-id", "req-1"}};
  r.body = std::move(body);
  return r;
}

// --- the upstream's side ---------------------------------------------------------------------

class script_server {
 public:
  using script = std::function<void(tcp::socket&, int index)>;

  explicit script_server(script s)
      : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
        script_(std::move(s)) {
    do_accept();
    io_thread_ = std::thread([this] { io_.run(); });
  }

  ~script_server() {
    io_.stop();
    io_thread_.join();
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mutex_);
      // Wakes scripts blocked in a read, so that a broken test ends instead of hanging.
      for (auto& s : sockets_) ::shutdown(s->native_handle(), SHUT_RDWR);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }

  std::uint16_t port() const { return acceptor_.local_endpoint().port(); }
  int accepted() const { return accepted_; }

 private:
  void do_accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (ec) return;
      const int index = accepted_++;
      auto shared = std::make_shared<tcp::socket>(std::move(socket));
      {
        std::lock_guard lock(mutex_);
        sockets_.push_back(shared);
        threads_.emplace_back([this, shared, index] { script_(*shared, index); });
      }
      do_accept();
    });
  }

  asio::io_context io_;
  tcp::acceptor acceptor_;
  script script_;
  std::thread io_thread_;
  std::atomic<int> accepted_{0};
  std::mutex mutex_;
  std::vector<std::shared_ptr<tcp::socket>> sockets_;
  std::vector<std::thread> threads_;
};

template <class Stream>
std::optional<http::request<http::string_body>> read_request(Stream& s, beast::flat_buffer& b) {
  http::request<http::string_body> req;
  boost::system::error_code ec;
  http::read(s, b, req, ec);
  if (ec) return std::nullopt;
  return req;
}

template <class Stream>
void send(Stream& s, std::string_view bytes) {
  boost::system::error_code ec;
  asio::write(s, asio::buffer(bytes.data(), bytes.size()), ec);
}

// Blocks until the peer closes (or the server shuts the socket down).
template <class Stream>
boost::system::error_code wait_for_eof(Stream& s) {
  char scratch[512];
  boost::system::error_code ec;
  while (!ec) s.read_some(asio::buffer(scratch), ec);
  return ec;  // asio::error::eof for a close, connection_reset for an abort
}

// A server that reads the request, sends `bytes` and closes the connection.
script_server::script sends_then_closes(std::string bytes) {
  return [bytes = std::move(bytes)](tcp::socket& s, int) {
    beast::flat_buffer b;
    if (!read_request(s, b)) return;
    send(s, bytes);
    s.close();
  };
}

const std::string ok_response =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello";

// A chunked event stream sent in two pieces, the second held back until the client has passed on
// a body piece holding "one": the two then reach the client in separate reads.
struct held_back_stream {
  held_back_stream(std::string first_piece, std::string rest_piece)
      : first(std::move(first_piece)), rest(std::move(rest_piece)) {}

  std::string first;  // after the head
  std::string rest;
  std::promise<void> passed_on;
  std::once_flag once;
  std::atomic<bool> held{false};  // the rest waited until the first piece was passed on

  script_server::script script() {
    return [this](tcp::socket& s, int) {
      beast::flat_buffer b;
      if (!read_request(s, b)) return;
      send(s,
           "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: "
           "chunked\r\n\r\n" +
               first);
      held = passed_on.get_future().wait_for(wait_limit) == std::future_status::ready;
      send(s, rest);
      wait_for_eof(s);
    };
  }
  void watch(recorder& events) {
    events.on_body_hook = [this](const std::string& piece) {
      if (piece.find("one") != std::string::npos)
        std::call_once(once, [this] { passed_on.set_value(); });
    };
  }
};

std::uint16_t unused_port() {
  asio::io_context io;
  tcp::acceptor a(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  return a.local_endpoint().port();
}

class UpstreamClientTest : public testing::Test {
 protected:
  tether::net::io_runtime io_;
};

// --- plain HTTP --------------------------------------------------------------------------------

// Records, for every callback, whether it ran on the given executor's thread.
class executor_recorder : public recorder {
 public:
  explicit executor_recorder(asio::io_context::executor_type executor)
      : executor_(std::move(executor)) {}
  void on_connected(bool reused) override {
    check();
    recorder::on_connected(reused);
  }
  void on_head(int status, header_list headers) override {
    check();
    recorder::on_head(status, std::move(headers));
  }
  void on_body(std::string bytes) override {
    check();
    recorder::on_body(std::move(bytes));
  }
  void on_end() override {
    check();
    recorder::on_end();
  }
  void on_closed() override {
    check();
    recorder::on_closed();
  }
  int off_thread() const { return off_thread_.load(); }

 private:
  void check() {
    if (!executor_.running_in_this_thread()) ++off_thread_;
  }
  asio::io_context::executor_type executor_;
  std::atomic<int> off_thread_{0};
};

TEST_F(UpstreamClientTest, PlainRequestDeliversHeadBodyEndThenClosed) {
  std::promise<http::request<http::string_body>> seen;
  script_server server([&](tcp::socket& s, int) {
    beast::flat_buffer b;
    auto req = read_request(s, b);
    if (!req) return;
    seen.set_value(*req);
    send(s, ok_response);
    wait_for_eof(s);
  });
  upstream_client client(io_, local_endpoint(server.port()));
  auto events = std::make_shared<recorder>();
  auto request = simple_request();
  request.headers.push_back({"authorization", "Bearer k"});
  request.headers.push_back({"content-length", "999"});           // framing is the client's
  request.headers.push_back({"x-evil", "a\r\nx-injected: yes"});  // would inject a header
  auto exchange = client.start(std::move(request), events);

  ASSERT_TRUE(events->wait_closed());
  EXPECT_THAT(events->log(), ElementsAre("connected:new", "head:200", "body", "end", "closed"));
  EXPECT_EQ(events->body(), "hello");
  ASSERT_NE(header(events->headers(), "content-type"), nullptr);
  EXPECT_EQ(*header(events->headers(), "content-type"), "application/json");

  auto fut = seen.get_future();
  ASSERT_EQ(fut.wait_for(wait_limit), std::future_status::ready);
  auto req = fut.get();
  EXPECT_EQ(req.method(), http::verb::post);
  EXPECT_EQ(req.target(), "/v1/chat/completions");
  EXPECT_EQ(req[http::field::host], "127.0.0.1:" + std::to_string(server.port()));
  EXPECT_EQ(req[http::field::content_length], "7");
  EXPECT_EQ(req[http::field::connection], "keep-alive");
  EXPECT_EQ(req["x-request-id"], "req-1");
  EXPECT_EQ(req[http::field::authorization], "Bearer k");
  EXPECT_EQ(req.count("x-injected"), 0u);
  EXPECT_EQ(req.count("x-evil"), 0u);
  EXPECT_EQ(req.body(), "{\"a\":1}");
  EXPECT_EQ(client.idle_connections(), 1u);
}

// More than the socket takes at once: the request is written partly at once, the rest
// asynchronously, and arrives whole.
TEST_F(UpstreamClientTest, ARequestLargerThanTheSocketBufferArrivesWhole) {
  std::string large(6 * 1024 * 1024, 'x');
  for (std::size_t i = 0; i < large.size(); i += 4096) large[i] = static_cast<char>('a' + i % 26);
  std::promise<std::string> seen;
  script_server server([&](tcp::socket& s, int) {
    beast::flat_buffer b;
    http::request_parser<http::string_body> parser;
    parser.body_limit(boost::none);  // Beast's default for a request is 1 MiB
    boost::system::error_code ec;
    http::read(s, b, parser, ec);
    seen.set_value(ec ? "read failed: " + ec.message() : parser.get().body());
    send(s, ok_response);
    wait_for_eof(s);
  });
  upstream_client client(io_, local_endpoint(server.port()));
  auto events = std::make_shared<recorder>();
  auto exchange = client.start(simple_request(large), events);
  ASSERT_TRUE(events->wait_closed());
  EXPECT_THAT(events->log(), ElementsAre("connected:new", "head:200", "body", "end", "closed"));
  auto fut = seen.get_future();
  ASSERT_EQ(fut.wait_for(wait_limit), std::future_status::ready);
  EXPECT_TRUE(fut.get() == large);
}

// A head split across reads, after an interim response in the same bytes as its first part.
TEST_F(UpstreamClientTest, AHeadInPiecesAfterAnInterimResponseIsParsedWhole) {
  std::promise<void> first_part_read;
  script_server server([&](tcp::socket& s, int) {
    beast::flat_buffer b;
    if (!read_request(s, b)) return;
    send(s, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 20");
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // two reads, not one
    send(s, "0 OK\r\nContent-Length: 5\r\nX-Part: two\r\n\r\nhello");
    wait_for_eof(s);
  });
  upstream_client client(io_, local_endpoint(server.port()));
  auto events = std::make_shared<recorder>();
  auto exchange = client.start(simple_request(), events);
  ASSERT_TRUE(events->wait_closed());
  EXPECT_THAT(events->log(), ElementsAre("connected:new", "head:200", "body", "end", "closed"));
  EXPECT_EQ(events->body(), "hello");
  ASSERT_NE(header(events->headers(), "x-part"), nullptr);
  EXPECT_EQ(*header(events->headers(), "x-part"), "two");
  EXPECT_EQ(client.idle_connections(), 1u);
}

TEST_F(UpstreamClientTest, StreamedBodyPieceArrivesBeforeTheNextIsSent) {
  held_back_stream stream("b\r\ndata: one\n\n\r\n", "b\r\ndata: two\n\n\r\n0\r\n\r\n");
  script_server server(stream.script());
  upstream_client client(io_, local_endpoint(server.port()));
  auto events = std::make_shared<recorder>();
  stream.watch(*events);
  auto exchange = client.start(simple_request(), events);

  ASSERT_TRUE(events->wait_closed());
  EXPECT_TRUE(stream.held);
  ASSERT_FALSE(events->pieces().empty());
  EXPECT_EQ(events->pieces().front(), "data: one\n\n");
  EXPECT_EQ(events->body(), "data: one\n\ndata: two\n\n");
  EXPECT_THAT(events->log(), ElementsAre("connected:new", "head:200", "body", "end", "closed"));
}

// A chunk's size line split between two reads: the half read first waits in the buffer for the
// rest, and the body arrives whole, the connection kept for the next exchange.
TEST_F(UpstreamClientTest, AChunkSizeLineSplitBetweenReadsIsParsedWhole) {
  held_back_stream stream("b\r\ndata: one\n\n\r\n1", "0\r\ndata: sixteen!\n\n\r\n0\r\n\r\n");
  script_server server(stream.script());
  upstream_client client(io_, local_endpoint(server.port()));
  auto events = std::make_shared<recorder>();
  stream.watch(*events);
  auto exchange = client.start(simple_request(), events);
  ASSERT_TRUE(events->wait_closed());
  EXPECT_TRUE(stream.held);
  EXPECT_EQ(events->body(), "data: one\n\ndata: sixteen!\n\n");
  EXPECT_THAT(events->log(), ElementsAre("connected:new", "head:200", "body", "end", "closed"));
  EXPECT_EQ(client.idle_connections(), 1u);
}

TEST_F(UpstreamClientTest, FiveSequentialExchangesReuseOneKeptAliveConnection) {
  script_server server([&](tcp::socket& s, int) {
    beast::flat_buffer b;
    while (read_request(s, b)) send(s, ok_response);
  });
  upstream_client client(io_, local_endpoint(server.port()));
  for (int i = 0; i < 5; ++i) {
    auto events = std::make_shared<recorder>();
    auto exchange = client.start(simple_request(), events);
    ASSERT_TRUE(events->wait_closed()) << "exchange " << i;
    EXPECT_THAT(events->log(), ElementsAre(i == 0 ? "connected:new" : "connected:reused",
                                           "head:200", "body", "end", "closed"))
        << "exchange " << i;
    EXPECT_EQ(events->body(), "hello");
  }
  EXPECT_EQ(server.accepted(), 1);
  EXPECT_EQ(client.idle_connections(), 1u);
}

// An exchange made for a caller connection runs on that connection's io thread (here another
// than the client's), on a new connection and on a pooled one; a cancel issued on that thread
// reaches the server at once.
TEST_F(UpstreamClientTest, AnExchangeWithAffinityRunsOnItsCallersThread) {
  tether::net::io_runtime callers;
  const auto caller = static_cast<asio::io_context*>(callers.native())->get_executor();
  std::promise<void> got_third;
  std::promise<std::chrono::steady_clock::time_point> third_closed;
  script_server server([&](tcp::socket& s, int) {
    beast::flat_buffer b;
    for (int i = 0; i < 2; ++i) {
      if (!read_request(s, b)) return;
      send(s, ok_response);
    }
    if (!read_request(s, b)) return;
    got_third.set_value();
    wait_for_eof(s);
    third_closed.set_value(std::chrono::steady_clock::now());
  });
  upstream_client client(io_, local_endpoint(server.port()));
  for (int i = 0; i < 2; ++i) {
    auto events = std::make_shared<executor_recorder>(caller);
    auto exchange = client.start(simple_request(), events,
                                 std::make_shared<const tether::net::connection_affinity>(
                                     tether::net::connection_affinity{caller}));
    ASSERT_TRUE(events->wait_closed()) << i;
    EXPECT_THAT(events->log(), ElementsAre(i == 0 ? "connected:new" : "connected:reused",
                                           "head:200", "body", "end", "closed"));
    EXPECT_EQ(events->off_thread(), 0) << "exchange " << i;
  }
  auto events = std::make_shared<executor_recorder>(caller);
  auto exchange = client.start(simple_request(), events,
                               std::make_shared<const tether::net::connection_affinity>(
                                   tether::net::connection_affinity{caller}));
  ASSERT_EQ(got_third.get_future().wait_for(wait_limit), std::future_status::ready);
  std::promise<std::chrono::steady_clock::time_point> cancelled;
  asio::post(caller, [&] {
    exchange->cancel();
    cancelled.set_value(std::chrono::steady_clock::now());
  });
  auto closed = third_closed.get_future();
  ASSERT_EQ(closed.wait_for(wait_limit), std::future_status::ready);
  EXPECT_LT(closed.get() - cancelled.get_future().get(), 50ms);
  ASSERT_TRUE(events->wait_closed());
  EXPECT_EQ(events->off_thread(), 0);
}

// With two io threads, an exchange runs on its caller's thread with that thread's connections:
// each thread keeps its own idle connection, and one thread's never serves the other.
TEST(UpstreamClientGroupTest, EachIoThreadKeepsAndReusesItsOwnConnections) {
  script_server server([&](tcp::socket& s, int) {
    beast::flat_buffer b;
    while (read_request(s, b)) send(s, ok_response);
  });
  tether::net::io_runtime first;
  tether::net::io_runtime second;
  tether::net::io_runtime* members[] = {&first, &second};
  upstream_client client(tether::net::io_group{{&first, &second}}, local_endpoint(server.port()));
  // Starts an exchange from a handler of io `i` (as a request's actor does on its io thread) and
  // returns what it reported.
  const auto exchange_on = [&](std::size_t i) {
    auto events = std::make_shared<recorder>();
    std::shared_ptr<tether::net::upstream_exchange> exchange;
    std::promise<std::thread::id> started;
    auto* job = new std::function<void()>([&] {
      exchange = client.start(simple_request(), events);
      started.set_value(std::this_thread::get_id());
    });
    members[i]->post(
        [](void* arg) {
          std::unique_ptr<std::function<void()>> f{static_cast<std::function<void()>*>(arg)};
          (*f)();
        },
        job);
    auto ran = started.get_future();
    EXPECT_EQ(ran.wait_for(wait_limit), std::future_status::ready);
    EXPECT_TRUE(events->wait_closed());
    return events->log();
  };
  EXPECT_THAT(exchange_on(0), ElementsAre("connected:new", "head:200", "body", "end", "closed"));
  EXPECT_THAT(exchange_on(1), ElementsAre("connected:new", "head:200", "body", "end", "closed"));
  EXPECT_EQ(server.accepted(), 2);
  EXPECT_EQ(client.idle_connections(), 2u);
  for (const std::size_t i : std::initializer_list<std::size_t>{0, 1, 1, 0}) {
    EXPECT_THAT(exchange_on(i),
                ElementsAre("connected:reused", "head:200", "body", "end", "closed"))
        << "on io " << i;
  }
  EXPECT_EQ(server.accepted(), 2);
}

// The checks both tables of cases below make on an exchange: its log, and where the case sets
// them, its failure, its body and the connections the upstream accepted.
template <typename Case>
void expect_exchange_saw(const Case& c, const recorder& events, const script_server& server) {
  EXPECT_THAT(events.log(), ElementsAreArray(c.log));
  if (c.failure) {
    EXPECT_EQ(events.failure(), *c.failure) << events.failure_message();
  }
  if (c.body) {
    EXPECT_EQ(events.body(), *c.body);
  }
  if (c.accepted) {
    EXPECT_EQ(server.accepted(), *c.accepted);
  }
}

// --- a pooled connection the upstream has dealt with ------------------------------------------

// What the upstream of a pooled-connection case did, for the test to wait on and count.
struct upstream_probe {
  std::atomic<int> requests_read{0};
  std::promise<void> first_closed;  // the upstream dropped the first connection
};

// The first exchange is answered and leaves its connection in the pool; the upstream then deals
// with that connection its own way, and the second exchange shows what the caller sees of it.
struct pooled_case {
  std::string name{};
  std::function<void(tcp::socket&, int index, upstream_probe&)> upstream{};
  bool awaits_first_closed = false;  // the second starts once the upstream dropped the first
  bool fresh_connection = false;     // the second asks for a new connection
  std::vector<std::string> log{};    // the second exchange's
  // The checks only some cases make (unset: not checked).
  std::optional<upstream_failure> failure{};
  std::optional<std::string> body{};
  std::optional<int> accepted{};       // connections the upstream accepted
  std::optional<int> requests_read{};  // requests the upstream read
};

void PrintTo(const pooled_case& c, std::ostream* os) {
  *os << c.name;
}

const pooled_case pooled_cases[] = {
    // The server's FIN is waiting on the idle connection: the pool drops it instead of sending
    // the request into it.
    {.name = "PooledConnectionClosedByServerIsNotReused",
     .upstream =
         [](tcp::socket& s, int index, upstream_probe& probe) {
           beast::flat_buffer b;
           if (index == 0) {
             // Answers once, then drops the kept-alive connection as an idle-timing server would.
             if (read_request(s, b)) send(s, ok_response);
             s.close();
             probe.first_closed.set_value();
             return;
           }
           while (read_request(s, b)) send(s, ok_response);
         },
     .awaits_first_closed = true,
     .log = {"connected:new", "head:200", "body", "end", "closed"},
     .body = "hello",
     .accepted = 2},
    // The request reached the server: it is a failed attempt for the caller's retry policy to
    // judge, never sent again on a new connection behind it.
    {.name = "APooledConnectionTheServerDropsAfterReadingTheRequestFailsOnce",
     .upstream =
         [](tcp::socket& s, int, upstream_probe& probe) {
           beast::flat_buffer b;
           if (!read_request(s, b)) return;
           ++probe.requests_read;
           send(s, ok_response);
           // The next request is read (the server may act on it), then the connection is reset.
           if (!read_request(s, b)) return;
           ++probe.requests_read;
           s.set_option(boost::asio::socket_base::linger(true, 0));
           s.close();
         },
     .log = {"connected:reused", "failure", "closed"},
     .failure = upstream_failure::reset,
     .accepted = 1,
     .requests_read = 2},
    // llama-server's close after a streamed answer: the next request reached the server's
    // kernel, but the server, done with the connection, never read it; it shuts the connection
    // down and closes it, and TCP resets the request it left unread. Nothing was acted on: net/
    // says so.
    {.name = "APooledConnectionTheServerClosedWithTheRequestUnreadIsStale",
     .upstream =
         [](tcp::socket& s, int, upstream_probe& probe) {
           beast::flat_buffer b;
           if (!read_request(s, b)) return;
           ++probe.requests_read;
           send(s, ok_response);
           s.wait(tcp::socket::wait_read);  // the next request is there, unread
           s.shutdown(tcp::socket::shutdown_both);
           s.close();
         },
     .log = {"connected:reused", "failure", "closed"},
     .failure = upstream_failure::stale_connection,
     .requests_read = 1},
    // A server that read the request and then closed in order (a FIN alone) may have acted on
    // it: a failed attempt, not a stale connection.
    {.name = "APooledConnectionTheServerClosesAfterReadingTheRequestIsAReset",
     .upstream =
         [](tcp::socket& s, int, upstream_probe&) {
           beast::flat_buffer b;
           if (!read_request(s, b)) return;
           send(s, ok_response);
           if (!read_request(s, b)) return;
           s.shutdown(tcp::socket::shutdown_both);
           s.close();
         },
     .log = {"connected:reused", "failure", "closed"},
     .failure = upstream_failure::reset},
    // The resend of a stale request asks for a new connection: the idle one is left alone.
    {.name = "AFreshConnectionRequestTakesNoPooledConnection",
     .upstream =
         [](tcp::socket& s, int, upstream_probe&) {
           beast::flat_buffer b;
           while (read_request(s, b)) send(s, ok_response);
         },
     .fresh_connection = true,
     .log = {"connected:new", "head:200", "body", "end", "closed"},
     .accepted = 2},
};

class UpstreamClientPooledTest : public UpstreamClientTest,
                                 public testing::WithParamInterface<pooled_case> {};

TEST_P(UpstreamClientPooledTest, TheSecondExchangeSeesWhatTheUpstreamDid) {
  const auto& c = GetParam();
  upstream_probe probe;
  script_server server([&](tcp::socket& s, int index) { c.upstream(s, index, probe); });
  upstream_client client(io_, local_endpoint(server.port()));
  auto first = std::make_shared<recorder>();
  auto e1 = client.start(simple_request(), first);
  ASSERT_TRUE(first->wait_closed());
  ASSERT_EQ(client.idle_connections(), 1u);
  if (c.awaits_first_closed) {
    ASSERT_EQ(probe.first_closed.get_future().wait_for(wait_limit), std::future_status::ready);
  }

  auto request = simple_request();
  request.fresh_connection = c.fresh_connection;
  auto second = std::make_shared<recorder>();
  auto e2 = client.start(std::move(request), second);
  ASSERT_TRUE(second->wait_closed());
  expect_exchange_saw(c, *second, server);
  if (c.requests_read) {
    EXPECT_EQ(probe.requests_read.load(), *c.requests_read);
  }
}

INSTANTIATE_TEST_SUITE_P(Pooled, UpstreamClientPooledTest, testing::ValuesIn(pooled_cases),
                         [](const auto& info) { return info.param.name; });

// Reads one request and answers nothing: says when the request came, and when and how the
// client's side of the socket ended.
struct hanging_server {
  std::promise<void> got_request;
  std::promise<std::chrono::steady_clock::time_point> saw_eof;
  boost::system::error_code ended_by;
  script_server server{[this](tcp::socket& s, int) {
    beast::flat_buffer b;
    if (!read_request(s, b)) return;
    got_request.set_value();
    ended_by = wait_for_eof(s);
    saw_eof.set_value(std::chrono::steady_clock::now());
  }};
};

TEST_F(UpstreamClientTest, CancelWhileAwaitingHeadClosesSocketWithinFiftyMs) {
  hanging_server hang;
  upstream_client client(io_, local_endpoint(hang.server.port()));
  auto events = std::make_shared<recorder>();
  auto exchange = client.start(simple_request(), events);
  ASSERT_EQ(hang.got_request.get_future().wait_for(wait_limit), std::future_status::ready);

  const auto cancelled_at = std::chrono::steady_clock::now();
  exchange->cancel();
  exchange->cancel();  // idempotent
  auto eof = hang.saw_eof.get_future();
  ASSERT_EQ(eof.wait_for(wait_limit), std::future_status::ready);
  EXPECT_LT(eof.get() - cancelled_at, 50ms);
  // Work given up on is closed with a reset: no FIN exchange, no TIME_WAIT left on this side.
  EXPECT_EQ(hang.ended_by, asio::error::connection_reset) << hang.ended_by.message();

  ASSERT_TRUE(events->wait_closed());
  EXPECT_THAT(events->log(), ElementsAre("connected:new", "closed"));
  EXPECT_EQ(client.idle_connections(), 0u);
  exchange->cancel();  // after the end: no effect
  EXPECT_EQ(events->closed_count(), 1);
}

// This process's open sockets.
std::size_t open_sockets() {
  std::size_t n = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    const auto target = std::filesystem::read_symlink(entry.path(), ec);  // gone meanwhile: skip
    if (!ec && target.native().rfind("socket:", 0) == 0) ++n;
  }
  return n;
}

// A cancel resets the connection at once, while its owner still holds the exchange; the
// descriptor itself goes when the exchange is let go (after the reset, with its owner's end), and
// none is left behind.
TEST_F(UpstreamClientTest, ACancelledExchangesDescriptorIsReleasedWhenTheExchangeIsLetGo) {
  const auto before = open_sockets();
  auto hang = std::make_unique<hanging_server>();
  upstream_client client(io_, local_endpoint(hang->server.port()));
  auto events = std::make_shared<recorder>();
  auto exchange = client.start(simple_request(), events);
  ASSERT_EQ(hang->got_request.get_future().wait_for(wait_limit), std::future_status::ready);
  exchange->cancel();
  ASSERT_EQ(hang->saw_eof.get_future().wait_for(wait_limit), std::future_status::ready);
  EXPECT_EQ(hang->ended_by, asio::error::connection_reset) << hang->ended_by.message();
  ASSERT_TRUE(events->wait_closed());

  std::weak_ptr<tether::net::upstream_exchange> gone = exchange;
  exchange.reset();
  const auto deadline = std::chrono::steady_clock::now() + wait_limit;
  while (!gone.expired() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  ASSERT_TRUE(gone.expired()) << "something still holds the cancelled exchange";
  hang.reset();  // the server's side of the connection goes with it
  EXPECT_EQ(open_sockets(), before) << "a socket outlived its exchange";
}

// The reset is set up once per connection, when it connects: an exchange cancelled on a pooled
// connection that an earlier exchange made is reset too.
TEST_F(UpstreamClientTest, ACancelOnAReusedConnectionIsAResetToo) {
  std::promise<void> second_request;
  std::promise<boost::system::error_code> ended;
  script_server server([&](tcp::socket& s, int) {
    beast::flat_buffer b;
    if (!read_request(s, b)) return;
    send(s, ok_response);
    if (!read_request(s, b)) return;
    second_request.set_value();
    ended.set_value(wait_for_eof(s));
  });
  upstream_client client(io_, local_endpoint(server.port()));
  auto first = std::make_shared<recorder>();
  auto one = client.start(simple_request(), first);
  ASSERT_TRUE(first->wait_closed());
  auto second = std::make_shared<recorder>();
  auto two = client.start(simple_request(), second);
  ASSERT_EQ(second_request.get_future().wait_for(wait_limit), std::future_status::ready);
  two->cancel();
  auto end = ended.get_future();
  ASSERT_EQ(end.wait_for(wait_limit), std::future_status::ready);
  const auto ec = end.get();
  EXPECT_EQ(ec, asio::error::connection_reset) << ec.message();
  ASSERT_TRUE(second->wait_closed());
  EXPECT_THAT(second->log(), ElementsAre("connected:reused", "closed"));
  EXPECT_EQ(server.accepted(), 1);
}

// The request's deadline carried out by the socket: at close_at the exchange ends as a cancel
// does (a reset, on_closed, no failure), with no call from the caller.
TEST_F(UpstreamClientTest, CloseAtResetsTheSocketAtThatMomentAndReportsOnlyTheClose) {
  hanging_server hang;
  upstream_client client(io_, local_endpoint(hang.server.port()));
  auto events = std::make_shared<recorder>();
  auto request = simple_request();
  const auto close_at = std::chrono::steady_clock::now() + 150ms;
  request.close_at = close_at;
  auto exchange = client.start(std::move(request), events);
  ASSERT_EQ(hang.got_request.get_future().wait_for(wait_limit), std::future_status::ready);

  auto eof = hang.saw_eof.get_future();
  ASSERT_EQ(eof.wait_for(wait_limit), std::future_status::ready);
  const auto closed = eof.get();
  EXPECT_GE(closed, close_at);
  EXPECT_LT(closed - close_at, 50ms);
  EXPECT_EQ(hang.ended_by, asio::error::connection_reset) << hang.ended_by.message();
  ASSERT_TRUE(events->wait_closed());
  EXPECT_THAT(events->log(), ElementsAre("connected:new", "closed"));
  EXPECT_EQ(client.idle_connections(), 0u);
}

// An exchange that ends first takes its close_at with it: the kept-alive connection it parked
// is not closed when that moment comes, and the next exchange reuses it.
TEST_F(UpstreamClientTest, CloseAtOfAnExchangeThatEndedLeavesItsPooledConnectionOpen) {
  script_server server([&](tcp::socket& s, int) {
    beast::flat_buffer b;
    while (read_request(s, b)) send(s, ok_response);
  });
  upstream_client client(io_, local_endpoint(server.port()));
  auto first = std::make_shared<recorder>();
  auto request = simple_request();
  const auto close_at = std::chrono::steady_clock::now() + 100ms;
  request.close_at = close_at;
  auto exchange = client.start(std::move(request), first);
  ASSERT_TRUE(first->wait_closed());
  EXPECT_THAT(first->log(), ElementsAre("connected:new", "head:200", "body", "end", "closed"));

  // Nothing to await: what is checked is that nothing happens at close_at.
  std::this_thread::sleep_until(close_at + 50ms);
  auto second = std::make_shared<recorder>();
  auto again = client.start(simple_request(), second);
  ASSERT_TRUE(second->wait_closed());
  EXPECT_THAT(second->log(), ElementsAre("connected:reused", "head:200", "body", "end", "closed"));
  EXPECT_EQ(server.accepted(), 1);
}

TEST_F(UpstreamClientTest, CancelRightAfterStartEndsWithClosedAndLeavesNoConnection) {
  std::mutex mutex;
  std::condition_variable changed;
  int eofs = 0;
  script_server server([&](tcp::socket& s, int) {
    wait_for_eof(s);
    std::lock_guard lock(mutex);
    ++eofs;
    changed.notify_all();
  });
  // "localhost" goes through name resolution, where a close alone would be lost; the IP literal
  // reaches connect at once.
  upstream_client by_name(io_, local_endpoint(server.port(), "localhost"));
  upstream_client by_ip(io_, local_endpoint(server.port()));
  std::vector<std::weak_ptr<tether::net::upstream_exchange>> finished;
  for (int i = 0; i < 20; ++i) {
    auto events = std::make_shared<recorder>();
    auto exchange = (i % 2 ? by_ip : by_name).start(simple_request(), events);
    exchange->cancel();
    ASSERT_TRUE(events->wait_closed()) << "exchange " << i;
    for (const auto& entry : events->log())
      EXPECT_THAT(entry, testing::AnyOf("connected:new", "closed")) << "exchange " << i;
    finished.push_back(exchange);
  }
  EXPECT_EQ(by_name.idle_connections() + by_ip.idle_connections(), 0u);
  // Every connection that reached the server was closed by the client.
  std::unique_lock lock(mutex);
  EXPECT_TRUE(changed.wait_for(lock, wait_limit, [&] { return eofs == server.accepted(); }))
      << eofs << " of " << server.accepted() << " connections closed";
  lock.unlock();
  // Nothing holds a finished exchange: the last handler let go of it.
  const auto deadline = std::chrono::steady_clock::now() + wait_limit;
  for (auto& weak : finished) {
    while (!weak.expired() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    EXPECT_TRUE(weak.expired());
  }
}

TEST_F(UpstreamClientTest, RefusedConnectionFailsAsConnectFailed) {
  upstream_client client(io_, local_endpoint(unused_port()));
  auto events = std::make_shared<recorder>();
  auto exchange = client.start(simple_request(), events);
  ASSERT_TRUE(events->wait_closed());
  EXPECT_THAT(events->log(), ElementsAre("failure", "closed"));
  EXPECT_EQ(events->failure(), upstream_failure::connect_failed);
  EXPECT_THAT(events->failure_message(), HasSubstr("connection refused"));
}

// One exchange on a new connection, as the upstream answers it: what the caller is told, and
// what is left of the connection.
struct exchange_case {
  std::string name{};
  script_server::script upstream{};
  std::vector<std::string> log{};
  // The checks only some cases make (unset: not checked).
  std::optional<upstream_failure> failure{};
  std::optional<std::string> body{};
  std::optional<std::size_t> idle{};  // connections the pool keeps after the exchange
  std::optional<int> accepted{};      // connections the upstream accepted
};

void PrintTo(const exchange_case& c, std::ostream* os) {
  *os << c.name;
}

const exchange_case exchange_cases[] = {
    // Half a head and then the end of the connection: the server broke, it did not send garbage.
    {.name = "AHeadCutShortFailsAsResetNotMalformed",
     .upstream = sends_then_closes("HTTP/1.1 200 OK\r\nContent-Le"),
     .log = {"connected:new", "failure", "closed"},
     .failure = upstream_failure::reset,
     .accepted = 1},
    {.name = "GarbageStatusLineFailsAsMalformed",
     .upstream =
         [](tcp::socket& s, int) {
           beast::flat_buffer b;
           if (!read_request(s, b)) return;
           send(s, "HELLO THERE\r\nContent-Length: 0\r\n\r\n");
           wait_for_eof(s);
         },
     .log = {"connected:new", "failure", "closed"},
     .failure = upstream_failure::malformed,
     .idle = 0},
    {.name = "ConnectionClosedMidBodyFailsAsResetAfterTheBytesSoFar",
     .upstream = sends_then_closes("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789"),
     .log = {"connected:new", "head:200", "body", "failure", "closed"},
     .failure = upstream_failure::reset,
     .body = "0123456789",
     .idle = 0},
    // A new connection is never retried: the request may have been acted on.
    {.name = "ServerClosedBeforeAnyResponseFailsAsReset",
     .upstream =
         [](tcp::socket& s, int) {
           beast::flat_buffer b;
           if (read_request(s, b)) s.close();
         },
     .log = {"connected:new", "failure", "closed"},
     .failure = upstream_failure::reset,
     .accepted = 1},
    // The close that makes a pooled connection stale (the request left unread), on a new
    // connection: a failure like any other, as only a pooled connection can be stale.
    {.name = "ANewConnectionTheServerClosesWithTheRequestUnreadIsAReset",
     .upstream =
         [](tcp::socket& s, int) {
           s.wait(tcp::socket::wait_read);
           s.shutdown(tcp::socket::shutdown_both);
           s.close();
         },
     .log = {"connected:new", "failure", "closed"},
     .failure = upstream_failure::reset},
    {.name = "ConnectionCloseResponseReadToEofIsNotPooled",
     .upstream = sends_then_closes("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end"),
     .log = {"connected:new", "head:200", "body", "end", "closed"},
     .body = "until the end",
     .idle = 0},
};

class UpstreamClientExchangeTest : public UpstreamClientTest,
                                   public testing::WithParamInterface<exchange_case> {};

TEST_P(UpstreamClientExchangeTest, TheCallerSeesWhatTheUpstreamDid) {
  const auto& c = GetParam();
  script_server server(c.upstream);
  upstream_client client(io_, local_endpoint(server.port()));
  auto events = std::make_shared<recorder>();
  auto exchange = client.start(simple_request(), events);
  ASSERT_TRUE(events->wait_closed());
  expect_exchange_saw(c, *events, server);
  if (c.idle) {
    EXPECT_EQ(client.idle_connections(), *c.idle);
  }
}

INSTANTIATE_TEST_SUITE_P(OneExchange, UpstreamClientExchangeTest, testing::ValuesIn(exchange_cases),
                         [](const auto& info) { return info.param.name; });

// A connection that served its response and is not kept alive is closed politely: the server
// reads an orderly end of stream, not a reset.
TEST_F(UpstreamClientTest, ConnectionNotKeptAliveAfterACompleteResponseIsClosedNotReset) {
  std::promise<boost::system::error_code> ended;
  script_server server([&](tcp::socket& s, int) {
    beast::flat_buffer b;
    if (!read_request(s, b)) return;
    send(s, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok");
    ended.set_value(wait_for_eof(s));
  });
  upstream_client client(io_, local_endpoint(server.port()));
  auto events = std::make_shared<recorder>();
  auto exchange = client.start(simple_request(), events);
  ASSERT_TRUE(events->wait_closed());
  EXPECT_THAT(events->log(), ElementsAre("connected:new", "head:200", "body", "end", "closed"));
  auto end = ended.get_future();
  ASSERT_EQ(end.wait_for(wait_limit), std::future_status::ready);
  const auto ec = end.get();
  EXPECT_EQ(ec, asio::error::eof) << ec.message();
}

TEST_F(UpstreamClientTest, IdleConnectionExpiresAfterIdleTimeout) {
  std::promise<void> saw_eof;
  script_server server([&](tcp::socket& s, int) {
    beast::flat_buffer b;
    if (read_request(s, b)) send(s, ok_response);
    wait_for_eof(s);
    saw_eof.set_value();
  });
  auto ep = local_endpoint(server.port());
  ep.idle_timeout = 100ms;
  upstream_client client(io_, ep);
  auto events = std::make_shared<recorder>();
  auto exchange = client.start(simple_request(), events);
  ASSERT_TRUE(events->wait_closed());
  // The pool's sweep closes the idle socket; the server sees it go.
  ASSERT_EQ(saw_eof.get_future().wait_for(wait_limit), std::future_status::ready);
  EXPECT_EQ(client.idle_connections(), 0u);
}

// --- HTTPS ------------------------------------------------------------------------------------

class UpstreamClientTlsTest : public UpstreamClientTest {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() /
           ("tether-upstream-tls-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    const std::string d = dir_.string();
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    std::ofstream(dir_ / "server.ext")
        << "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n"
           "extendedKeyUsage=serverAuth\n";
    const std::string script =
        "cd '" + d + "' && " +  //
        "openssl req -x509 " + key +
        " -keyout ca.key -out ca.pem -days 2 "  //
        "-subj '/CN=tether test CA' && " +      //
        "openssl req -x509 " +
        key +
        " -keyout other.key -out other.pem -days 2 "  //
        "-subj '/CN=some other CA' && " +             //
        "openssl req " +
        key +
        " -keyout server.key -out server.csr "                                        //
        "-subj '/CN=localhost' && " +                                                 //
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "  //
        "-out server.pem -days 2 -extfile server.ext";
    generated_ = std::system(("(" + script + ") >/dev/null 2>&1").c_str()) == 0;
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }

  void SetUp() override {
    if (!generated_) GTEST_FAIL() << "openssl could not generate the test certificates";
  }

  static void trust(const std::string& ca_file) {
    // Read when the client builds its TLS context; the empty dir keeps the system store out.
    ::setenv("SSL_CERT_FILE", (dir_ / ca_file).c_str(), 1);
    ::setenv("SSL_CERT_DIR", dir_.c_str(), 1);
  }

  // A TLS upstream that answers each request on a connection with ok_response.
  static script_server::script tls_script(std::shared_ptr<asio::ssl::context> ctx) {
    return [ctx](tcp::socket& s, int) {
      asio::ssl::stream<tcp::socket&> tls(s, *ctx);
      boost::system::error_code ec;
      tls.handshake(asio::ssl::stream_base::server, ec);
      if (ec) return;
      beast::flat_buffer b;
      while (read_request(tls, b)) send(tls, ok_response);
    };
  }

  static std::shared_ptr<asio::ssl::context> server_context() {
    auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
    ctx->use_certificate_chain_file((dir_ / "server.pem").string());
    ctx->use_private_key_file((dir_ / "server.key").string(), asio::ssl::context::pem);
    return ctx;
  }

  static upstream_endpoint tls_endpoint(std::uint16_t port, std::string host) {
    auto ep = local_endpoint(port, std::move(host));
    ep.tls = true;
    return ep;
  }

  static inline std::filesystem::path dir_;
  static inline bool generated_ = false;
};

TEST_F(UpstreamClientTlsTest, TrustedCertificateForLocalhostSucceedsAndIsReused) {
  script_server server(tls_script(server_context()));
  trust("ca.pem");
  upstream_client client(io_, tls_endpoint(server.port(), "localhost"));
  for (int i = 0; i < 2; ++i) {
    auto events = std::make_shared<recorder>();
    auto exchange = client.start(simple_request(), events);
    ASSERT_TRUE(events->wait_closed());
    EXPECT_THAT(events->log(), ElementsAre(i == 0 ? "connected:new" : "connected:reused",
                                           "head:200", "body", "end", "closed"))
        << events->failure_message();
    EXPECT_EQ(events->body(), "hello");
  }
  EXPECT_EQ(server.accepted(), 1);
}

TEST_F(UpstreamClientTlsTest, CertificateFromUntrustedCaFailsAsTlsFailed) {
  script_server server(tls_script(server_context()));
  trust("other.pem");
  upstream_client client(io_, tls_endpoint(server.port(), "localhost"));
  auto events = std::make_shared<recorder>();
  auto exchange = client.start(simple_request(), events);
  ASSERT_TRUE(events->wait_closed());
  EXPECT_THAT(events->log(), ElementsAre("failure", "closed"));
  EXPECT_EQ(events->failure(), upstream_failure::tls_failed);
  EXPECT_THAT(events->failure_message(), HasSubstr("certificate verification failed"));
}

TEST_F(UpstreamClientTlsTest, CertificateForAnotherHostFailsAsTlsFailed) {
  script_server server(tls_script(server_context()));
  trust("ca.pem");
  // The certificate names localhost only.
  upstream_client client(io_, tls_endpoint(server.port(), "127.0.0.1"));
  auto events = std::make_shared<recorder>();
  auto exchange = client.start(simple_request(), events);
  ASSERT_TRUE(events->wait_closed());
  EXPECT_EQ(events->failure(), upstream_failure::tls_failed);
  EXPECT_THAT(events->failure_message(), HasSubstr("certificate verification failed"));
  EXPECT_THAT(events->failure_message(), HasSubstr("mismatch"));
}

}  // namespace

TEST_F(UpstreamClientTlsTest, SilentServerFailsAsConnectTimeoutCoveringTheHandshake) {
  std::promise<void> saw_eof;
  // Accepts the TCP connection but never answers the ClientHello.
  script_server server([&](tcp::socket& s, int) {
    wait_for_eof(s);
    saw_eof.set_value();
  });
  trust("ca.pem");
  auto ep = tls_endpoint(server.port(), "localhost");
  ep.connect_timeout = 100ms;
  upstream_client client(io_, ep);
  auto events = std::make_shared<recorder>();
  auto exchange = client.start(simple_request(), events);
  ASSERT_TRUE(events->wait_closed());
  EXPECT_THAT(events->log(), ElementsAre("failure", "closed"));
  EXPECT_EQ(events->failure(), upstream_failure::connect_failed);
  EXPECT_THAT(events->failure_message(), HasSubstr("timed out"));
  EXPECT_EQ(saw_eof.get_future().wait_for(wait_limit), std::future_status::ready);
}
