// A response channel's calls reach the caller in the order they were made, whichever thread made
// each: a request actor runs on the io thread at one moment and on another worker the next.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "net/downstream.hpp"
#include "net/io_runtime.hpp"

namespace tether::net {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

// Sends one request and reads until the server closes or `done` is in what arrived.
std::string exchange(std::uint16_t port, std::string_view done) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  std::string got;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
    const std::string request = "GET /stream HTTP/1.1\r\nHost: test\r\n\r\n";
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    const auto deadline = steady::now() + 2s;
    while (got.find(done) == std::string::npos && steady::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char data[4096];
      const auto n = ::recv(fd, data, sizeof data, 0);
      if (n <= 0) break;
      got.append(data, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  return got;
}

class channel_slot {
 public:
  void put(std::shared_ptr<response_channel> channel) {
    std::lock_guard lock(mutex_);
    channel_ = std::move(channel);
    changed_.notify_all();
  }
  std::shared_ptr<response_channel> take() {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, 2s, [&] { return channel_ != nullptr; });
    return std::move(channel_);
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::shared_ptr<response_channel> channel_;
};

// One io thread: the connection's executor is the io_context's own, where a handler posted from
// the io thread runs only after the current handler returns, behind whatever other threads post
// in between.
class DownstreamSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.emplace(io_, server_limits{}, [this](incoming_request, auto channel) {
      slot_.put(std::move(channel));
      return std::shared_ptr<exchange_observer>();
    });
    port_ = server_->listen("127.0.0.1", 0);
  }
  void TearDown() override { server_.reset(); }

  // Runs `on_io` inside one handler of the io thread, and `elsewhere` on another thread while
  // that handler is still running.
  void on_io_then_elsewhere(std::function<void()> on_io, std::function<void()> elsewhere) {
    std::promise<void> ran;
    auto& io = *static_cast<boost::asio::io_context*>(io_.native());
    boost::asio::post(io, [&] {
      on_io();
      std::thread other(elsewhere);
      other.join();
      ran.set_value();
    });
    ASSERT_EQ(ran.get_future().wait_for(2s), std::future_status::ready);
  }

  io_runtime io_;
  std::optional<http_server> server_;
  std::uint16_t port_ = 0;
  channel_slot slot_;
};

TEST_F(DownstreamSessionTest, AStreamEndedOnTheIoThreadIsWholeThoughItsChannelGoesElsewhere) {
  auto answer = std::async(std::launch::async, [&] { return exchange(port_, "0\r\n\r\n"); });
  auto channel = slot_.take();
  ASSERT_TRUE(channel);
  on_io_then_elsewhere(
      [&] {
        channel->start_stream(200, {{"content-type", "text/event-stream"}});
        channel->send_chunk("data: one\n\n");
        channel->send_chunk("data: two\n\n");
        channel->end_stream();
      },
      // The handler lets go of its channel on another thread, as a request actor's state goes
      // with the actor wherever it last ran; a channel dropped unanswered aborts the exchange.
      [&] { channel.reset(); });
  const auto got = answer.get();
  EXPECT_NE(got.find("data: one"), std::string::npos) << got;
  EXPECT_NE(got.find("data: two"), std::string::npos) << got;
  EXPECT_NE(got.find("0\r\n\r\n"), std::string::npos) << got;
}

TEST_F(DownstreamSessionTest, AStreamsEndMadeElsewhereDoesNotOvertakeItsEventsMadeOnTheIoThread) {
  auto answer = std::async(std::launch::async, [&] { return exchange(port_, "0\r\n\r\n"); });
  auto channel = slot_.take();
  ASSERT_TRUE(channel);
  on_io_then_elsewhere(
      [&] {
        channel->start_stream(200, {{"content-type", "text/event-stream"}});
        channel->send_chunk("data: last\n\n");
      },
      [&] { channel->end_stream(); });
  const auto got = answer.get();
  const auto last = got.find("data: last");
  const auto end = got.find("0\r\n\r\n");
  ASSERT_NE(last, std::string::npos) << got;
  ASSERT_NE(end, std::string::npos) << got;
  EXPECT_LT(last, end) << got;
}

}  // namespace
}  // namespace tether::net
