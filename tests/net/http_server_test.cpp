// The client-facing server over real sockets on 127.0.0.1: a blocking test client (every wait
// bounded by poll) talks to an http_server whose handler records what it was given.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "net/downstream.hpp"
#include "net/io_runtime.hpp"
#include "tests/support/receive_stamp_probe.hpp"

namespace tether::net {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
namespace http = boost::beast::http;

constexpr auto bound = 2s;  // any single wait: a hang fails fast

struct test_response {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;

  std::string header(const std::string& name) const {
    const auto found = headers.find(name);
    return found == headers.end() ? std::string() : found->second;
  }
};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// A blocking HTTP client on a plain socket: what a user's SDK sees, byte for byte.
class test_client {
 public:
  explicit test_client(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  }
  ~test_client() { close(); }
  test_client(const test_client&) = delete;
  test_client& operator=(const test_client&) = delete;

  bool connected() const { return connected_; }

  bool send(std::string_view data) {
    while (!data.empty()) {
      const auto n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  enum class read_result { data, closed, timeout };

  // One read of whatever arrives before `deadline`, appended to buffer_.
  read_result read_once(steady::time_point deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
    if (left.count() <= 0) return read_result::timeout;
    pollfd p{fd_, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready == 0) return read_result::timeout;
    char data[16384];
    const auto n = ::recv(fd_, data, sizeof data, 0);
    if (n <= 0) return read_result::closed;  // EOF or reset
    buffer_.append(data, static_cast<std::size_t>(n));
    return read_result::data;
  }

  bool read_until(std::string_view needle, std::chrono::milliseconds timeout = bound) {
    const auto deadline = steady::now() + timeout;
    while (buffer_.find(needle) == std::string::npos) {
      if (read_once(deadline) != read_result::data) return false;
    }
    return true;
  }

  // True when the server closed the connection (EOF or reset) within the timeout; any bytes
  // that came first stay in buffer_.
  bool wait_closed(std::chrono::milliseconds timeout = bound) {
    const auto deadline = steady::now() + timeout;
    for (;;) {
      switch (read_once(deadline)) {
        case read_result::data:
          continue;
        case read_result::closed:
          return true;
        case read_result::timeout:
          return false;
      }
    }
  }

  std::optional<test_response> read_response(std::chrono::milliseconds timeout = bound) {
    const auto deadline = steady::now() + timeout;
    http::response_parser<http::string_body> parser;
    parser.eager(true);
    parser.body_limit(16 * 1024 * 1024);
    while (!parser.is_done()) {
      if (!buffer_.empty()) {
        boost::beast::error_code ec;
        const auto used = parser.put(boost::asio::buffer(buffer_.data(), buffer_.size()), ec);
        buffer_.erase(0, used);
        if (ec && ec != http::error::need_more) return std::nullopt;
        if (used > 0) continue;
      }
      const auto got = read_once(deadline);
      if (got == read_result::timeout) return std::nullopt;
      if (got == read_result::closed) {
        if (!parser.got_some()) return std::nullopt;
        boost::beast::error_code ec;
        parser.put_eof(ec);
        if (ec || !parser.is_done()) return std::nullopt;
      }
    }
    test_response response;
    const auto& message = parser.get();
    response.status = static_cast<int>(message.result_int());
    for (const auto& field : message) {
      response.headers[lower(std::string(field.name_string()))] = std::string(field.value());
    }
    response.body = message.body();
    return response;
  }

  std::string buffer_;

 private:
  int fd_ = -1;
  bool connected_ = false;
};

std::string get(std::string_view target, std::string_view extra = "") {
  return "GET " + std::string(target) + " HTTP/1.1\r\nHost: test\r\n" + std::string(extra) + "\r\n";
}

std::string post(std::string_view target, std::string_view body) {
  return "POST " + std::string(target) +
         " HTTP/1.1\r\nHost: test\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
         std::string(body);
}

// Requests the handler was given, in order; waits are bounded.
class request_log {
 public:
  void add(const incoming_request& request) {
    std::lock_guard lock(mutex_);
    requests_.push_back(request);
    changed_.notify_all();
  }
  bool wait_for(std::size_t n, std::chrono::milliseconds timeout = bound) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return requests_.size() >= n; });
  }
  incoming_request at(std::size_t i) {
    std::lock_guard lock(mutex_);
    return requests_.at(i);
  }
  std::size_t size() {
    std::lock_guard lock(mutex_);
    return requests_.size();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<incoming_request> requests_;
};

// Channels the handler kept, for the test to answer later from its own thread.
class channel_box {
 public:
  void add(std::shared_ptr<response_channel> channel) {
    std::lock_guard lock(mutex_);
    channels_.push_back(std::move(channel));
    changed_.notify_all();
  }
  std::shared_ptr<response_channel> wait(std::size_t i, std::chrono::milliseconds timeout = bound) {
    std::unique_lock lock(mutex_);
    if (!changed_.wait_for(lock, timeout, [&] { return channels_.size() > i; })) return nullptr;
    return channels_[i];
  }
  void clear() {
    std::lock_guard lock(mutex_);
    channels_.clear();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::shared_ptr<response_channel>> channels_;
};

class counting_observer : public exchange_observer {
 public:
  void on_client_gone() override {
    if (calls.fetch_add(1) == 0) gone.set_value(steady::now());
  }
  std::atomic<int> calls{0};
  std::promise<steady::time_point> gone;
};

int status_for(protocol_error error) {
  switch (error) {
    case protocol_error::none:
      return 200;
    case protocol_error::body_too_large:
      return 413;
    case protocol_error::headers_too_large:
      return 431;
    case protocol_error::malformed:
      return 400;
  }
  return 500;
}

// Answers at once: refusals with their status, others echo method, target and body.
request_handler echo_handler(request_log& log) {
  return [&log](incoming_request request, std::shared_ptr<response_channel> channel) {
    log.add(request);
    const auto* probe = find_header(request.headers, "X-Test");
    channel->send_full(status_for(request.error),
                       {{"x-method", request.method},
                        {"x-target", request.target},
                        {"x-test-seen", probe ? *probe : ""}},
                       request.error == protocol_error::none ? request.body : "refused");
    return std::shared_ptr<exchange_observer>();
  };
}

template <class Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds timeout = bound) {
  const auto deadline = steady::now() + timeout;
  while (!predicate()) {
    if (steady::now() > deadline) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void serve(request_handler handler, server_limits limits = {}) {
    server_.emplace(io_, limits, std::move(handler));
    port_ = server_->listen("127.0.0.1", 0);
  }
  // A handler that answers nothing itself: each exchange's channel goes to channels_, for the
  // test to answer from.
  void serve_keeping_channels() {
    serve([&](incoming_request, std::shared_ptr<response_channel> channel) {
      channels_.add(std::move(channel));
      return std::shared_ptr<exchange_observer>();
    });
  }
  void TearDown() override {
    channels_.clear();
    server_.reset();
  }

  request_log log_;
  channel_box channels_;
  io_runtime io_;
  std::optional<http_server> server_;
  std::uint16_t port_ = 0;
};

TEST_F(HttpServerTest, GetReachesHandlerWithLowerCasedHeadersAndIsAnswered) {
  serve(echo_handler(log_));
  const auto before = steady::now();
  test_client client(port_);
  ASSERT_TRUE(client.send(get("/v1/models?x=1", "X-Test: Value\r\n")));
  const auto response = client.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->header("x-target"), "/v1/models?x=1");
  EXPECT_EQ(response->header("x-method"), "GET");
  EXPECT_EQ(response->header("x-test-seen"), "Value");
  EXPECT_EQ(response->header("server"), "tether");
  EXPECT_EQ(response->header("content-length"), "0");
  ASSERT_TRUE(log_.wait_for(1));
  const auto request = log_.at(0);
  EXPECT_EQ(request.error, protocol_error::none);
  ASSERT_EQ(request.headers.size(), 2u);
  EXPECT_EQ(request.headers[1].name, "x-test");
  EXPECT_GE(request.arrival, before);
  EXPECT_LE(request.arrival, steady::now());
}

// One io thread serving echo on a listening socket that asked for the kernel's receive stamps.
class HttpServerArrivalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    port_ = server_.listen("127.0.0.1", 0);
    // The kernel may take a moment to start stamping.
    ASSERT_TRUE(test::await_receive_stamps(bound));
  }

  request_log log_;
  io_runtime io_;
  http_server server_{io_, server_limits{}, echo_handler(log_)};
  std::uint16_t port_ = 0;
};

// A request's arrival is when its bytes reached the host, not when a busy io thread read them:
// the caller's deadline is counted from it. The one io thread is kept busy for 80 ms while the
// second request on a keep-alive connection comes in.
TEST_F(HttpServerArrivalTest, ArrivalIsWhenTheKernelReceivedTheRequestNotWhenItWasRead) {
  test_client client(port_);
  ASSERT_TRUE(client.send(get("/first")));
  ASSERT_TRUE(client.read_response());

  std::promise<void> busy;
  auto busy_started = busy.get_future();
  // When the io thread is free again: it cannot have read the request before then.
  std::promise<std::pair<steady::time_point, std::chrono::system_clock::time_point>> freed;
  auto free_again = freed.get_future();
  boost::asio::post(*static_cast<boost::asio::io_context*>(io_.native()), [&busy, &freed] {
    busy.set_value();
    std::this_thread::sleep_for(80ms);  // the io thread's backlog, simulated
    freed.set_value({steady::now(), std::chrono::system_clock::now()});
  });
  ASSERT_EQ(busy_started.wait_for(bound), std::future_status::ready);
  const auto sent = steady::now();
  const auto sent_wall = std::chrono::system_clock::now();
  ASSERT_TRUE(client.send(get("/second")));
  const auto response = client.read_response();
  ASSERT_TRUE(response);
  ASSERT_TRUE(log_.wait_for(2));
  const auto request = log_.at(1);
  EXPECT_EQ(request.target, "/second");
  ASSERT_EQ(free_again.wait_for(bound), std::future_status::ready);
  const auto [free_at, free_at_wall] = free_again.get();
  ASSERT_GE(free_at - sent, 70ms);  // the io thread was indeed busy when the request came
  EXPECT_GE(request.arrival, sent - 1ms);
  EXPECT_LT(request.arrival, free_at) << "arrival was taken when the request was read";
  EXPECT_GE(request.arrival_wall, sent_wall - 1ms);
  EXPECT_LT(request.arrival_wall, free_at_wall) << "the wall-clock arrival too";
}

// A connection opened ahead of its first request (a client's warm pool): the request arrives
// when its bytes do, not at the accept, or its deadline would be charged the connection's idle
// time.
TEST_F(HttpServerArrivalTest, AFreshConnectionsFirstRequestArrivesWithItsBytesNotAtTheAccept) {
  test_client client(port_);
  ASSERT_TRUE(client.connected());
  std::this_thread::sleep_for(100ms);  // the connection's idle time is what is tested
  const auto sent = steady::now();
  ASSERT_TRUE(client.send(get("/first")));
  ASSERT_TRUE(client.read_response());
  const auto answered = steady::now();
  ASSERT_TRUE(log_.wait_for(1));
  const auto request = log_.at(0);
  EXPECT_GE(request.arrival, sent - 1ms) << "arrival was taken at the accept";
  EXPECT_LT(request.arrival, answered);
}

// Requests sent the moment a connection opens, and each next one the moment the previous
// response is read, from several clients at once: whenever the bytes arrive (before or after the
// session starts waiting for them), the session sees them. A guard for the first read's wait
// (a peek, see downstream_session.cpp): an async_wait instead passed this too, in 5 runs, so it
// does not prove that window, only that no request of these 2,000 is left hanging.
// Two io threads (server.threads = 2): the connections take turns between them, and each
// connection's requests are handled on its own thread, every time.
TEST(HttpServerGroupTest, ConnectionsTakeTurnsBetweenTheIoThreadsAndStayOnTheirs) {
  io_runtime first;
  io_runtime second;
  std::mutex mutex;
  std::map<std::string, std::thread::id> thread_of;  // by X-Test: the connection's name
  std::atomic<int> moved{0};
  http_server server{io_group{{&first, &second}}, server_limits{},
                     [&](incoming_request request, std::shared_ptr<response_channel> channel) {
                       const auto* name = find_header(request.headers, "X-Test");
                       {
                         std::lock_guard lock(mutex);
                         auto [at, fresh] =
                             thread_of.emplace(name ? *name : "", std::this_thread::get_id());
                         if (!fresh && at->second != std::this_thread::get_id()) ++moved;
                       }
                       channel->send_full(200, {}, "");
                       return std::shared_ptr<exchange_observer>();
                     }};
  const auto port = server.listen("127.0.0.1", 0);
  std::vector<std::unique_ptr<test_client>> clients;
  for (int c = 0; c < 6; ++c) {
    clients.push_back(std::make_unique<test_client>(port));
    ASSERT_TRUE(clients.back()->connected());
  }
  for (int round = 0; round < 5; ++round) {
    for (std::size_t c = 0; c < clients.size(); ++c) {
      ASSERT_TRUE(clients[c]->send(get("/", "X-Test: c" + std::to_string(c) + "\r\n")));
      const auto response = clients[c]->read_response();
      ASSERT_TRUE(response) << "client " << c << ", round " << round;
      EXPECT_EQ(response->status, 200);
    }
  }
  EXPECT_EQ(moved.load(), 0);
  std::map<std::thread::id, int> per_thread;
  {
    std::lock_guard lock(mutex);
    ASSERT_EQ(thread_of.size(), 6u);
    for (const auto& [name, id] : thread_of) ++per_thread[id];
  }
  ASSERT_EQ(per_thread.size(), 2u);
  for (const auto& [id, connections] : per_thread) EXPECT_EQ(connections, 3);
  clients.clear();
  server.close_all();
}

TEST_F(HttpServerTest, RequestsSentAtOnceOnNewAndKeptAliveConnectionsAreAllAnswered) {
  serve(echo_handler(log_));
  constexpr int clients = 4;
  constexpr int connections = 100;
  constexpr int per_connection = 5;
  std::atomic<int> answered{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      for (int k = 0; k < connections; ++k) {
        test_client client(port_);
        for (int i = 0; i < per_connection; ++i) {
          const std::string target =
              "/c" + std::to_string(c) + "-" + std::to_string(k) + "-" + std::to_string(i);
          if (!client.send(get(target))) return;
          const auto response = client.read_response(1000ms);
          if (!response || response->header("x-target") != target) return;
          ++answered;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(answered.load(), clients * connections * per_connection);
}

TEST_F(HttpServerTest, KeepAliveConnectionServesTwoRequests) {
  serve(echo_handler(log_));
  test_client client(port_);
  ASSERT_TRUE(client.send(post("/one", "first")));
  const auto first = client.read_response();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->body, "first");
  EXPECT_EQ(first->headers.count("connection"), 0u);
  ASSERT_TRUE(client.send(post("/two", "second")));
  const auto second = client.read_response();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->header("x-target"), "/two");
  EXPECT_EQ(second->body, "second");
  EXPECT_EQ(server_->open_connections(), 1u);
}

TEST_F(HttpServerTest, PipelinedRequestsInOneWriteAreAnsweredInOrder) {
  // The first is answered late from another thread, the second at once: order must still hold.
  std::vector<std::thread> late;
  serve([&](incoming_request request, std::shared_ptr<response_channel> channel) {
    log_.add(request);
    if (request.target == "/first") {
      late.emplace_back([channel, body = request.body] {
        std::this_thread::sleep_for(30ms);
        channel->send_full(200, {}, "first:" + body);
      });
    } else {
      channel->send_full(200, {}, "second:" + request.body);
    }
    return std::shared_ptr<exchange_observer>();
  });
  test_client client(port_);
  ASSERT_TRUE(client.send(post("/first", "abc") + post("/second", "defg")));
  const auto first = client.read_response();
  const auto second = client.read_response();
  for (auto& thread : late) thread.join();
  ASSERT_TRUE(first);
  ASSERT_TRUE(second);
  EXPECT_EQ(first->body, "first:abc");
  EXPECT_EQ(second->body, "second:defg");
}

// A thousand requests in the buffer, each answered from inside the handler: every response is
// written at once, and each next request goes on from the io queue, not from deeper in the
// stack of the one before.
TEST_F(HttpServerTest, AThousandPipelinedRequestsAnsweredAtOnceAreAllAnsweredInOrder) {
  serve([&](incoming_request request, std::shared_ptr<response_channel> channel) {
    channel->send_full(200, {}, request.target);
    return std::shared_ptr<exchange_observer>();
  });
  test_client client(port_);
  std::string burst;
  for (int i = 0; i < 1000; ++i) burst += get("/" + std::to_string(i));
  ASSERT_TRUE(client.send(burst));
  for (int i = 0; i < 1000; ++i) {
    const auto response = client.read_response();
    ASSERT_TRUE(response) << "response " << i;
    ASSERT_EQ(response->body, "/" + std::to_string(i));
  }
}

// A request the server refuses before any handler could serve it: the client is answered with
// the refusal's status, and the handler is given the refusal (what kind, what was parsed).
struct refusal_case {
  std::string name{};
  server_limits limits{};
  std::string request{};  // all the client sends
  int status = 0;
  protocol_error error = protocol_error::none;
  // The checks only some cases make (false or unset: not made).
  bool says_close = false;              // the response carries "Connection: close"
  bool closes = false;                  // the server closes the connection after it
  std::optional<std::string> target{};  // the target the handler was given
  bool detail = false;                  // the handler was told why (error_detail)
};

void PrintTo(const refusal_case& c, std::ostream* os) {
  *os << c.name;
}

std::vector<refusal_case> refusal_cases() {
  server_limits small_body;
  small_body.max_request_bytes = 1000;
  server_limits few_fields;
  few_fields.max_header_fields = 5;
  server_limits small_head;
  small_head.max_header_bytes = 1024;
  std::string many_fields;
  for (int i = 0; i < 10; ++i) many_fields += "X-F" + std::to_string(i) + ": v\r\n";
  const std::string piece(800, 'x');
  return {
      // Only the head is sent: the answer must not wait for the 5000 announced bytes.
      {.name = "ContentLengthOverLimitIsRefusedWithoutReadingBodyAndClosed",
       .limits = small_body,
       .request = "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n",
       .status = 413,
       .error = protocol_error::body_too_large,
       .says_close = true,
       .closes = true,
       .target = "/v1/chat/completions"},
      {.name = "ChunkedBodyGrowingOverLimitIsRefusedAndClosed",
       .limits = small_body,
       .request = "POST /v1/embeddings HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
                  "\r\n320\r\n" +
                  piece + "\r\n320\r\n" + piece + "\r\n",
       .status = 413,
       .error = protocol_error::body_too_large,
       .closes = true},
      {.name = "TooManyHeaderFieldsAreRefusedAsHeadersTooLarge",
       .limits = few_fields,
       .request = get("/many", many_fields),
       .status = 431,
       .error = protocol_error::headers_too_large,
       .closes = true},
      {.name = "HeaderBytesOverLimitAreRefusedAsHeadersTooLarge",
       .limits = small_head,
       .request = get("/big", "X-Big: " + std::string(2000, 'a') + "\r\n"),
       .status = 431,
       .error = protocol_error::headers_too_large,
       .closes = true},
      {.name = "ContentLengthWithTransferEncodingIsMalformedAndClosed",
       .request = "POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nTransfer-Encoding: "
                  "chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
       .status = 400,
       .error = protocol_error::malformed,
       .closes = true,
       .detail = true},
      {.name = "DuplicateContentLengthIsMalformed",
       .request = "POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nContent-Length: "
                  "3\r\n\r\nabc",
       .status = 400,
       .error = protocol_error::malformed},
      {.name = "UnparsableRequestLineIsMalformedWithEmptyTarget",
       .request = "\x01\x02 nonsense\r\n\r\n",
       .status = 400,
       .error = protocol_error::malformed,
       .closes = true,
       .target = ""},
  };
}

class HttpServerRefusalTest : public HttpServerTest,
                              public ::testing::WithParamInterface<refusal_case> {};

TEST_P(HttpServerRefusalTest, IsAnsweredWithItsStatusAndGivenToTheHandler) {
  const auto& c = GetParam();
  serve(echo_handler(log_), c.limits);
  test_client client(port_);
  ASSERT_TRUE(client.send(c.request));
  const auto response = client.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, c.status);
  if (c.says_close) {
    EXPECT_EQ(response->header("connection"), "close");
  }
  if (c.closes) {
    EXPECT_TRUE(client.wait_closed());
  }
  ASSERT_TRUE(log_.wait_for(1));
  EXPECT_EQ(log_.at(0).error, c.error);
  if (c.target) {
    EXPECT_EQ(log_.at(0).target, *c.target);
  }
  if (c.detail) {
    EXPECT_FALSE(log_.at(0).error_detail.empty());
  }
}

INSTANTIATE_TEST_SUITE_P(Refusals, HttpServerRefusalTest, ::testing::ValuesIn(refusal_cases()),
                         [](const auto& info) { return info.param.name; });

TEST_F(HttpServerTest, ChunkedBodyWithinLimitIsDecoded) {
  serve(echo_handler(log_));
  test_client client(port_);
  ASSERT_TRUE(
      client.send("POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: "
                  "chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"));
  const auto response = client.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->body, "abcde");
}

TEST_F(HttpServerTest, HalfARequestPastHeaderTimeoutGets408AndClose) {
  server_limits limits;
  limits.header_timeout = 200ms;
  serve(echo_handler(log_), limits);
  test_client client(port_);
  const auto start = steady::now();
  ASSERT_TRUE(client.send("GET /slow HTTP/1.1\r\nHost: t\r\n"));
  const auto response = client.read_response();
  const auto elapsed = steady::now() - start;
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 408);
  EXPECT_TRUE(client.wait_closed());
  EXPECT_GE(elapsed, 150ms);
  EXPECT_LT(elapsed, 1500ms);
  EXPECT_EQ(log_.size(), 0u);
}

TEST_F(HttpServerTest, BodyTricklingPastHeaderTimeoutGets408) {
  server_limits limits;
  limits.header_timeout = 200ms;
  serve(echo_handler(log_), limits);
  test_client client(port_);
  const auto start = steady::now();
  ASSERT_TRUE(client.send("POST /slow HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc"));
  std::this_thread::sleep_for(100ms);  // the trickle itself, not a synchronisation
  ASSERT_TRUE(client.send("d"));
  const auto response = client.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 408);
  EXPECT_LT(steady::now() - start, 1500ms);
  EXPECT_EQ(log_.size(), 0u);
}

TEST_F(HttpServerTest, SilentFreshConnectionIsClosedWithoutAResponse) {
  server_limits limits;
  limits.header_timeout = 200ms;
  serve(echo_handler(log_), limits);
  test_client client(port_);
  EXPECT_TRUE(client.wait_closed());
  EXPECT_TRUE(client.buffer_.empty());
}

TEST_F(HttpServerTest, IdleKeepAliveConnectionIsClosedSilentlyAfterKeepaliveTimeout) {
  server_limits limits;
  limits.keepalive_timeout = 200ms;
  serve(echo_handler(log_), limits);
  test_client client(port_);
  ASSERT_TRUE(client.send(get("/a")));
  ASSERT_TRUE(client.read_response());
  const auto start = steady::now();
  EXPECT_TRUE(client.wait_closed());
  EXPECT_GE(steady::now() - start, 150ms);
  EXPECT_TRUE(client.buffer_.empty());
}

// The session's timer is lazy (a wait pending for an earlier time re-arms when it wakes): a
// connection kept busy past several keep-alive timeouts stays open, and its idle timeout counts
// from its last response.
TEST_F(HttpServerTest, KeptAliveConnectionsIdleTimeoutCountsFromItsLastResponse) {
  server_limits limits;
  limits.keepalive_timeout = 300ms;
  serve(echo_handler(log_), limits);
  test_client client(port_);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(client.send(get("/a")));
    ASSERT_TRUE(client.read_response()) << "request " << i;
    std::this_thread::sleep_for(150ms);  // idle time is what is tested: half the timeout
  }
  ASSERT_TRUE(client.send(get("/last")));
  ASSERT_TRUE(client.read_response());
  const auto last = steady::now();
  EXPECT_TRUE(client.wait_closed());
  const auto idle = steady::now() - last;
  EXPECT_GE(idle, 250ms);
  EXPECT_LT(idle, 1500ms);
  EXPECT_EQ(log_.size(), 6u);
}

// The header timeout of a request on a kept-alive connection comes before the idle timeout the
// timer was waiting for: the earlier time must replace the pending wait.
TEST_F(HttpServerTest, HalfARequestOnAKeptAliveConnectionGets408AtTheHeaderTimeout) {
  server_limits limits;
  limits.header_timeout = 200ms;
  limits.keepalive_timeout = 5s;
  serve(echo_handler(log_), limits);
  test_client client(port_);
  ASSERT_TRUE(client.send(get("/first")));
  ASSERT_TRUE(client.read_response());
  // Past the fresh connection's header timeout: the timer now waits for the idle timeout.
  std::this_thread::sleep_for(300ms);
  const auto start = steady::now();
  ASSERT_TRUE(client.send("GET /slow HTTP/1.1\r\nHost: t\r\n"));
  const auto response = client.read_response(3s);
  const auto elapsed = steady::now() - start;
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 408);
  EXPECT_GE(elapsed, 150ms);
  EXPECT_LT(elapsed, 1500ms);
  EXPECT_EQ(log_.size(), 1u);
}

// A client that stops reading must not hold the connection (and the work behind it): the write
// that cannot progress for keepalive_timeout closes it.
TEST_F(HttpServerTest, ClientThatStopsReadingIsClosedAfterTheStallTimeout) {
  server_limits limits;
  limits.keepalive_timeout = 300ms;
  const std::string large(32 * 1024 * 1024, 'x');  // more than both sockets' buffers hold
  std::promise<steady::time_point> answered;
  serve(
      [&](incoming_request, std::shared_ptr<response_channel> channel) {
        channel->send_full(200, {}, large);
        answered.set_value(steady::now());
        return std::shared_ptr<exchange_observer>();
      },
      limits);
  test_client client(port_);
  ASSERT_TRUE(client.send(get("/large")));
  auto answered_at = answered.get_future();
  ASSERT_EQ(answered_at.wait_for(bound), std::future_status::ready);
  const auto start = answered_at.get();
  EXPECT_TRUE(eventually([&] { return server_->open_connections() == 0; }, 3s));
  const auto held = steady::now() - start;
  EXPECT_GE(held, 250ms);
  EXPECT_LT(held, 2500ms);
}

TEST_F(HttpServerTest, StreamedChunksReachClientOneByOneAsSent) {
  serve_keeping_channels();
  test_client client(port_);
  ASSERT_TRUE(client.send(post("/v1/chat/completions", "{}")));
  const auto channel = channels_.wait(0);
  ASSERT_TRUE(channel);

  std::promise<steady::time_point> second_sent;
  std::thread sender([&] {
    channel->start_stream(200, {{"content-type", "text/event-stream"}});
    channel->send_chunk("data: one\n\n");
    std::this_thread::sleep_for(50ms);  // the spacing under test
    second_sent.set_value(steady::now());
    channel->send_chunk("data: two\n\n");
    channel->end_stream();
  });
  const bool saw_first = client.read_until("data: one\n\n");
  const auto first_seen = steady::now();
  const bool second_in_same_read = client.buffer_.find("data: two") != std::string::npos;
  auto second_future = second_sent.get_future();
  const bool ended = client.read_until("0\r\n\r\n");
  sender.join();
  ASSERT_TRUE(saw_first);
  EXPECT_FALSE(second_in_same_read);
  EXPECT_LT(first_seen, second_future.get());
  ASSERT_TRUE(ended);
  EXPECT_NE(client.buffer_.find("Transfer-Encoding: chunked\r\n"), std::string::npos);
  EXPECT_NE(client.buffer_.find("b\r\ndata: two\n\n\r\n0\r\n\r\n"), std::string::npos);

  // The stream ended properly: the connection serves the next request.
  client.buffer_.clear();
  ASSERT_TRUE(client.send(get("/next")));
  const auto next_channel = channels_.wait(1);
  ASSERT_TRUE(next_channel);
  next_channel->send_full(204, {}, "");
  const auto next = client.read_response();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, 204);
}

// Each chunk's size line is its length in lower-case hex, across every number of digits; the
// client's parser reassembles the body byte for byte.
TEST_F(HttpServerTest, ChunksOfEverySizeAreFramedWithTheirHexLengths) {
  const std::vector<std::size_t> sizes = {1,   9,    10,   15,    16,    17,     255,
                                          256, 4095, 4096, 65535, 65536, 1048577};
  std::string expected;
  for (std::size_t i = 0; i < sizes.size(); ++i)
    expected += std::string(sizes[i], static_cast<char>('a' + i));
  serve([&](incoming_request, std::shared_ptr<response_channel> channel) {
    channel->start_stream(200, {});
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      channel->send_chunk(std::string(sizes[i], static_cast<char>('a' + i)));
    }
    channel->end_stream();
    return std::shared_ptr<exchange_observer>();
  });
  test_client client(port_);
  ASSERT_TRUE(client.send(get("/chunks")));
  const auto response = client.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body.size(), expected.size());
  EXPECT_TRUE(response->body == expected);
}

// Told of the close itself: within `bound`, where the server's own timers that could also end
// the exchange (header and keep-alive timeouts) are 10 s and more away.
TEST_F(HttpServerTest, ClientLeavingDuringHandlerWaitCallsOnClientGoneOnce) {
  auto observer = std::make_shared<counting_observer>();
  serve([&](incoming_request, std::shared_ptr<response_channel> channel) {
    channels_.add(std::move(channel));
    return observer;
  });
  auto gone = observer->gone.get_future();
  test_client client(port_);
  ASSERT_TRUE(client.send(post("/v1/chat/completions", "{}")));
  const auto channel = channels_.wait(0);
  ASSERT_TRUE(channel);
  const auto left = steady::now();
  client.close();
  ASSERT_EQ(gone.wait_for(bound), std::future_status::ready);
  EXPECT_GE(gone.get(), left);
  // Late calls are ignored, and the observer is not told twice.
  channel->send_full(200, {}, "too late");
  channel->abort();
  EXPECT_TRUE(eventually([&] { return server_->open_connections() == 0; }));
  EXPECT_EQ(observer->calls.load(), 1);
}

// The wait that watches the client during an exchange completes on the next request's bytes:
// they are kept, not taken for the client leaving, and answered after the first.
TEST_F(HttpServerTest, RequestSentWhileTheFirstIsAnsweredIsKeptAndAnsweredAfterIt) {
  auto observer = std::make_shared<counting_observer>();
  serve([&](incoming_request request, std::shared_ptr<response_channel> channel) {
    log_.add(request);
    channels_.add(std::move(channel));
    return observer;
  });
  test_client client(port_);
  ASSERT_TRUE(client.send(post("/first", "abc")));
  const auto first_channel = channels_.wait(0);
  ASSERT_TRUE(first_channel);
  ASSERT_TRUE(client.send(post("/second", "defg")));
  first_channel->send_full(200, {}, "first");
  const auto first = client.read_response();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->body, "first");
  const auto second_channel = channels_.wait(1);
  ASSERT_TRUE(second_channel);
  second_channel->send_full(200, {}, "second");
  const auto second = client.read_response();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->body, "second");
  ASSERT_EQ(log_.size(), 2u);
  EXPECT_EQ(log_.at(1).target, "/second");
  EXPECT_EQ(log_.at(1).body, "defg");
  EXPECT_EQ(observer->calls.load(), 0);
  EXPECT_EQ(server_->open_connections(), 1u);
}

TEST_F(HttpServerTest, CompleteResponseDoesNotReportClientGone) {
  auto observer = std::make_shared<counting_observer>();
  serve([&](incoming_request, std::shared_ptr<response_channel> channel) {
    channel->send_full(200, {}, "done");
    return observer;
  });
  test_client client(port_);
  ASSERT_TRUE(client.send(get("/x")));
  ASSERT_TRUE(client.read_response());
  client.close();
  EXPECT_TRUE(eventually([&] { return server_->open_connections() == 0; }));
  EXPECT_EQ(observer->calls.load(), 0);
}

TEST_F(HttpServerTest, ConnectionsBeyondMaxAreClosedAndServingGoesOn) {
  server_limits limits;
  limits.max_connections = 2;
  serve(echo_handler(log_), limits);
  test_client first(port_);
  test_client second(port_);
  ASSERT_TRUE(first.send(get("/1")));
  ASSERT_TRUE(first.read_response());
  ASSERT_TRUE(second.send(get("/2")));
  ASSERT_TRUE(second.read_response());

  test_client third(port_);
  third.send(get("/3"));
  EXPECT_TRUE(third.wait_closed());
  EXPECT_TRUE(third.buffer_.empty());

  ASSERT_TRUE(first.send(get("/1again")));
  const auto again = first.read_response();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->header("x-target"), "/1again");

  second.close();
  ASSERT_TRUE(eventually([&] { return server_->open_connections() == 1; }));
  test_client fourth(port_);
  ASSERT_TRUE(fourth.send(get("/4")));
  const auto served = fourth.read_response();
  ASSERT_TRUE(served);
  EXPECT_EQ(served->header("x-target"), "/4");
}

TEST_F(HttpServerTest, StopAcceptingRefusesConnectsClosesIdleAndFinishesInFlight) {
  serve([&](incoming_request request, std::shared_ptr<response_channel> channel) {
    if (request.target == "/slow") {
      channels_.add(std::move(channel));
    } else {
      channel->send_full(200, {}, "fast");
    }
    return std::shared_ptr<exchange_observer>();
  });
  test_client idle(port_);
  ASSERT_TRUE(idle.send(get("/fast")));
  ASSERT_TRUE(idle.read_response());
  test_client busy(port_);
  ASSERT_TRUE(busy.send(get("/slow")));
  const auto channel = channels_.wait(0);
  ASSERT_TRUE(channel);

  server_->stop_accepting();
  EXPECT_TRUE(idle.wait_closed());
  test_client late(port_);
  EXPECT_FALSE(late.connected());

  channel->send_full(200, {}, "finished");
  const auto response = busy.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->body, "finished");
  EXPECT_EQ(response->header("connection"), "close");
  EXPECT_TRUE(busy.wait_closed());
}

TEST_F(HttpServerTest, CloseAllClosesEveryConnection) {
  serve_keeping_channels();
  test_client idle(port_);
  test_client busy(port_);
  ASSERT_TRUE(busy.send(get("/slow")));
  ASSERT_TRUE(channels_.wait(0));
  ASSERT_TRUE(eventually([&] { return server_->open_connections() == 2; }));
  server_->close_all();
  EXPECT_TRUE(idle.wait_closed());
  EXPECT_TRUE(busy.wait_closed());
  EXPECT_TRUE(eventually([&] { return server_->open_connections() == 0; }));
}

TEST_F(HttpServerTest, LargeResponseWrittenInPiecesArrivesWhole) {
  std::string large(8 * 1024 * 1024, 'x');
  for (std::size_t i = 0; i < large.size(); i += 4096) large[i] = static_cast<char>('a' + i % 26);
  serve([&](incoming_request, std::shared_ptr<response_channel> channel) {
    channel->send_full(200, {}, large);
    return std::shared_ptr<exchange_observer>();
  });
  test_client client(port_);
  ASSERT_TRUE(client.send(get("/large") + get("/again")));
  const auto first = client.read_response(5s);
  ASSERT_TRUE(first);
  EXPECT_TRUE(first->body == large);
  const auto second = client.read_response(5s);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->body.size(), large.size());
}

TEST_F(HttpServerTest, ChannelDroppedWithoutResponseClosesConnection) {
  serve([&](incoming_request, std::shared_ptr<response_channel>) {
    return std::shared_ptr<exchange_observer>();
  });
  test_client client(port_);
  ASSERT_TRUE(client.send(get("/nobody")));
  EXPECT_TRUE(client.wait_closed());
  EXPECT_TRUE(client.buffer_.empty());
}

TEST_F(HttpServerTest, ConnectionCloseFromClientClosesAfterResponse) {
  serve(echo_handler(log_));
  test_client client(port_);
  ASSERT_TRUE(client.send(get("/x", "Connection: close\r\n")));
  const auto response = client.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->header("connection"), "close");
  EXPECT_TRUE(client.wait_closed());
}

TEST_F(HttpServerTest, Http10StreamIsUnframedAndEndsWithTheConnection) {
  serve([&](incoming_request, std::shared_ptr<response_channel> channel) {
    channel->start_stream(200, {});
    channel->send_chunk("data: a\n\n");
    channel->end_stream();
    return std::shared_ptr<exchange_observer>();
  });
  test_client client(port_);
  ASSERT_TRUE(client.send("GET /old HTTP/1.0\r\n\r\n"));
  EXPECT_TRUE(client.wait_closed());
  EXPECT_EQ(client.buffer_.find("Transfer-Encoding"), std::string::npos);
  EXPECT_NE(client.buffer_.find("\r\n\r\ndata: a\n\n"), std::string::npos);
}

TEST_F(HttpServerTest, HandlerHeaderWithLineBreakIsDropped) {
  serve([&](incoming_request, std::shared_ptr<response_channel> channel) {
    channel->send_full(200, {{"x-good", "1"}, {"x-bad", "a\r\nx-injected: 1"}}, "");
    return std::shared_ptr<exchange_observer>();
  });
  test_client client(port_);
  ASSERT_TRUE(client.send(get("/x")));
  const auto response = client.read_response();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->header("x-good"), "1");
  EXPECT_EQ(response->headers.count("x-bad"), 0u);
  EXPECT_EQ(response->headers.count("x-injected"), 0u);
}

// Out of descriptors, accept fails; the loop must back off and go on, not die.
TEST_F(HttpServerTest, AcceptFailingForLackOfDescriptorsRecovers) {
  // The sanitizer runtimes need descriptors of their own while this test holds every one: UBSan
  // verifies a type it has not cached through a pipe, cannot open one, and reports a false
  // "invalid vptr" (once in a cold CI run; 2–4 in 200 runs beside another). The plain build runs
  // it.
  if (TETHER_SANITIZED) GTEST_SKIP() << "starves the sanitizer runtime of descriptors";
  serve(echo_handler(log_));
  rlimit original{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &original), 0);
  rlimit lowered = original;
  lowered.rlim_cur = std::min<rlim_t>(original.rlim_cur, 512);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lowered), 0);

  // The client's socket exists before the descriptors run out; the server's accept cannot.
  const int client_fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(client_fd, 0);
  std::vector<int> filler;
  for (int fd = ::dup(client_fd); fd >= 0; fd = ::dup(client_fd)) filler.push_back(fd);
  ASSERT_EQ(errno, EMFILE);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port_);
  ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  ASSERT_EQ(::connect(client_fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  const std::string request = get("/after-emfile");
  ASSERT_EQ(::send(client_fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  // The server's accept fails for want of a descriptor (the path under test), at least once.
  const bool accept_failed = eventually([&] { return server_->accept_failures() > 0; });
  const bool served_meanwhile = log_.size() > 0;
  for (int fd : filler) ::close(fd);
  ::setrlimit(RLIMIT_NOFILE, &original);

  EXPECT_TRUE(accept_failed) << "accept never ran out of descriptors";
  EXPECT_FALSE(served_meanwhile);
  EXPECT_TRUE(log_.wait_for(1));
  pollfd p{client_fd, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 2000), 1);
  char data[512];
  const auto n = ::recv(client_fd, data, sizeof data, 0);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(data, static_cast<std::size_t>(n)).rfind("HTTP/1.1 200", 0), 0u);
  ::close(client_fd);
}

}  // namespace
}  // namespace tether::net
