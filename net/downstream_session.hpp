// One client connection: reads requests under the limits and timeouts, hands each to the
// request_handler, writes its response (full or chunked) and keeps the connection alive or not.
//
//   waiting ──first byte──▶ reading ──request──▶ exchange ──response written──▶ waiting
//      │ idle timeout,          │ 408 / refusal      │ client gone, abort        (or lingering
//      ▼ drain, EOF             ▼                    ▼                            ─▶ closed)
//    closed                  exchange             closed
//
// Every member is touched on the socket's io thread only (io_executor.hpp); the public functions
// post to it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/container/small_vector.hpp>

#include "net/downstream.hpp"
#include "net/downstream_request_parser.hpp"
#include "net/io_executor.hpp"
#include "net/receive_stamp.hpp"

namespace tether::net {

struct server_context;

class downstream_session : public std::enable_shared_from_this<downstream_session> {
 public:
  using socket_type = boost::asio::basic_stream_socket<boost::asio::ip::tcp, io_executor>;

  downstream_session(socket_type socket, std::shared_ptr<server_context> context);
  ~downstream_session();
  downstream_session(const downstream_session&) = delete;
  downstream_session& operator=(const downstream_session&) = delete;

  // Registers with the server and starts reading; false (and nothing started) at
  // max_connections.
  bool start();
  // Drain: closes the connection if it is between requests; otherwise it closes after the
  // current response.
  void close_if_idle();
  void close_now();

  // The response_channel's calls, posted here by it (see downstream_session.cpp).
  void post_send_full(std::uint64_t exchange, int status, header_list headers, std::string body);
  void post_start_stream(std::uint64_t exchange, int status, header_list headers);
  void post_send_chunk(std::uint64_t exchange, std::string data);
  void post_end_stream(std::uint64_t exchange);
  void post_abort(std::uint64_t exchange);
  // The same executor, for the upstream exchanges made for this connection's requests.
  const std::shared_ptr<const connection_affinity>& affinity() const { return affinity_; }
  // The peer's IP address as bytes (response_channel::peer_address).
  std::string peer_address() const;

 private:
  enum class phase { waiting, reading, exchange, lingering, closed };
  // A point in time on both clocks: the deadline counts on the steady one, logs show the wall.
  struct moment {
    std::chrono::steady_clock::time_point steady;
    std::chrono::system_clock::time_point wall;
  };
  // When the bytes of `read` reached the host: its kernel stamp, or now without one.
  static moment received_at(const stamped_read& read);
  using parser_type = downstream_request_parser;

  void do_wait_request();
  void do_wait_readable();
  void on_readable(boost::beast::error_code ec);
  stamped_read read_into_buffer(std::size_t limit);
  void on_request_bytes();
  void on_pipelined_bytes();
  void on_lingering_bytes();
  void do_read_header();
  void arm_request_deadline();
  void on_read_header(boost::beast::error_code ec, std::size_t n);
  void do_write_continue();
  void on_write_continue(boost::beast::error_code ec, std::size_t n);
  void do_read_body();
  void on_read_body(boost::beast::error_code ec, std::size_t n);
  void on_read_error(boost::beast::error_code ec);
  void do_write_timeout_response();
  void on_write_timeout_response(boost::beast::error_code ec, std::size_t n);
  void dispatch_request();
  incoming_request make_request(bool with_body);

  void refuse(protocol_error error, std::string detail);
  void start_exchange(incoming_request request);
  void do_watch_read();
  bool current(std::uint64_t exchange) const;

  // One of the channel's calls, queued until this session's executor runs it.
  struct channel_call {
    enum class kind : std::uint8_t { send_full, start_stream, chunk, end_stream, abort };
    kind what = kind::abort;
    std::uint64_t exchange = 0;
    int status = 0;
    header_list headers;
    std::string data;
  };
  // Queues a call behind the ones made before it; `at_once`: runs the queue now when this is
  // called on the session's executor and nothing is queued (an actor on the io thread answering).
  void queue_call(channel_call call, bool at_once = false);
  void run_calls();
  void run_call(channel_call& call);

  void send_full(int status, header_list headers, std::string body);
  void start_stream(int status, header_list headers);
  void send_chunk(std::string data);
  void end_stream();
  void do_write();
  // A response's usual pieces (head, body; a few chunks) without an allocation per write.
  using write_buffers = boost::container::small_vector<boost::asio::const_buffer, 4>;
  void gather_writes(write_buffers& buffers) const;
  void consume_written(std::size_t n);
  void on_write(boost::beast::error_code ec, std::size_t n);
  void on_exchange_done();

  void do_linger();
  void do_close();

  enum class timer_use { idle, request_deadline, write_stall, linger };
  void arm_timer(timer_use use, std::chrono::steady_clock::time_point at);
  void wait_until(std::chrono::steady_clock::time_point at);
  void start_timer_wait(std::chrono::steady_clock::time_point at);
  void disarm_timer();
  void on_timer(boost::beast::error_code ec, std::uint64_t serial);
  void on_timer_use_due(timer_use use);

  const io_executor executor_;
  boost::beast::basic_stream<boost::asio::ip::tcp, io_executor> stream_;
  std::shared_ptr<const connection_affinity> affinity_;
  std::shared_ptr<server_context> context_;
  boost::beast::flat_buffer buffer_;
  std::optional<parser_type> parser_;
  // One timer, as its uses never overlap: the request deadline while reading, a stalled write
  // during the exchange, the lingering close at the end.
  boost::asio::basic_waitable_timer<
      std::chrono::steady_clock, boost::asio::wait_traits<std::chrono::steady_clock>, io_executor>
      timer_;
  timer_use timer_use_ = timer_use::request_deadline;
  std::chrono::steady_clock::time_point timer_due_ = std::chrono::steady_clock::time_point::max();
  bool timer_waiting_ = false;  // a wait is pending on timer_, to wake up at timer_wait_at_
  std::chrono::steady_clock::time_point timer_wait_at_;
  std::uint64_t timer_serial_ = 0;
  // The channel's calls run in the order they were made, whichever thread made each. A post per
  // call did not keep it: Asio queues a handler posted from its own thread behind those other
  // threads post before the current handler returns, and a request actor's calls come from
  // whichever thread runs it at the time — a stream's end could overtake its last events, and
  // the abort of a dropped channel the whole answer.
  std::mutex calls_mutex_;
  std::vector<channel_call> calls_;  // guarded by calls_mutex_
  bool calls_scheduled_ = false;     // guarded by calls_mutex_: run_calls is posted or running
  std::vector<channel_call> running_calls_;  // this session's executor only
  bool timed_out_ = false;
  phase phase_ = phase::waiting;
  bool registered_ = false;
  bool fresh_ = true;
  std::chrono::steady_clock::time_point connected_;
  std::chrono::system_clock::time_point connected_wall_;
  std::chrono::steady_clock::time_point arrival_;
  std::chrono::system_clock::time_point arrival_wall_;

  // The current exchange.
  std::uint64_t exchange_ = 0;
  bool keep_alive_ = false;
  bool head_request_ = false;
  bool http10_ = false;
  bool response_started_ = false;
  bool streaming_ = false;
  bool response_complete_ = false;
  std::shared_ptr<exchange_observer> observer_;
  bool wait_pending_ = false;  // one readiness wait serves the wait, the watch and the linger
  // When the first bytes of a pipelined request reached the host.
  std::optional<moment> buffered_arrival_;

  std::deque<std::string> write_queue_;
  std::size_t write_offset_ = 0;  // bytes of write_queue_.front() already written
  bool writing_ = false;
};

}  // namespace tether::net
