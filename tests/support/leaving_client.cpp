#include "tests/support/leaving_client.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http.hpp>

namespace tether::test {
namespace {

namespace http = boost::beast::http;

std::size_t count_events(const std::string& body) {
  std::size_t n = 0;
  for (auto at = body.find("\n\n"); at != std::string::npos; at = body.find("\n\n", at + 2)) ++n;
  return n;
}

}  // namespace

leaving_client::leaving_client(std::uint16_t port, std::string_view target, std::string_view body,
                               const header_map& headers) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw http_error("leaving_client: socket failed", false);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd_);
    throw http_error("leaving_client: connect to 127.0.0.1:" + std::to_string(port) + " failed",
                     false);
  }
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::string text = "POST " + std::string(target) +
                     " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
                     "\r\nContent-Type: application/json\r\n" +
                     "Content-Length: " + std::to_string(body.size()) + "\r\n";
  for (const auto& [name, value] : headers) text += name + ": " + value + "\r\n";
  text += "\r\n";
  text += body;
  std::size_t sent = 0;
  while (sent < text.size()) {
    auto n = ::send(fd_, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      ::close(fd_);
      throw http_error("leaving_client: writing the request failed", false);
    }
    sent += static_cast<std::size_t>(n);
  }
  reader_ = std::thread([this] { read_loop(); });
}

leaving_client::~leaving_client() {
  leave();
  reader_.join();
  ::close(fd_);
}

void leaving_client::read_loop() {
  http::response_parser<http::string_body> parser;
  parser.eager(true);
  parser.body_limit(boost::none);
  std::string pending;
  char buffer[16 * 1024];
  while (true) {
    auto n = ::recv(fd_, buffer, sizeof buffer, 0);
    std::lock_guard lock(mutex_);
    if (n <= 0) {
      if (!left_) server_closed_ = true;
      break;
    }
    pending.append(buffer, static_cast<std::size_t>(n));
    boost::system::error_code ec;
    while (!pending.empty() && !parser.is_done()) {
      auto used = parser.put(boost::asio::buffer(pending), ec);
      pending.erase(0, used);
      if (ec || used == 0) break;
    }
    if (ec && ec != http::error::need_more) {
      server_closed_ = true;  // not HTTP: as good as a broken connection for these tests
      break;
    }
    if (parser.is_header_done()) {
      status_ = static_cast<int>(parser.get().result_int());
      body_ = parser.get().body();
      events_ = count_events(body_);
    }
    complete_ = parser.is_done();
    changed_.notify_all();
    if (complete_) break;
  }
  changed_.notify_all();
}

bool leaving_client::wait_head(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return status_ != 0; });
}

bool leaving_client::wait_events(std::size_t k, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return events_ >= k; });
}

bool leaving_client::wait_end(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return complete_ || server_closed_; });
}

test_clock::time_point leaving_client::leave() {
  std::lock_guard lock(mutex_);
  const auto now = test_clock::now();
  if (!left_) {
    left_ = true;
    ::shutdown(fd_, SHUT_RDWR);
  }
  return now;
}

int leaving_client::status() const {
  std::lock_guard lock(mutex_);
  return status_;
}
std::string leaving_client::body() const {
  std::lock_guard lock(mutex_);
  return body_;
}
std::size_t leaving_client::events() const {
  std::lock_guard lock(mutex_);
  return events_;
}
bool leaving_client::complete() const {
  std::lock_guard lock(mutex_);
  return complete_;
}
bool leaving_client::server_closed() const {
  std::lock_guard lock(mutex_);
  return server_closed_;
}

}  // namespace tether::test
