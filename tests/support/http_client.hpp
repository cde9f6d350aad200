// A small blocking HTTP/1.1 client for tests (Beast underneath, hidden here). Every operation is
// bounded by a timeout; nothing waits forever.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json/value.hpp>

namespace tether::test {

using header_map = std::vector<std::pair<std::string, std::string>>;
using test_clock = std::chrono::steady_clock;
using ms_double = std::chrono::duration<double, std::milli>;

constexpr std::chrono::milliseconds default_timeout{10000};

// A transport failure: refused, reset, closed early or timed out (never an HTTP error status).
class http_error : public std::runtime_error {
 public:
  http_error(const std::string& what, bool timed_out)
      : std::runtime_error(what), timed_out_(timed_out) {}
  bool timed_out() const { return timed_out_; }

 private:
  bool timed_out_;
};

struct http_response {
  int status = 0;
  header_map headers;  // names in lower case, in arrival order
  std::string body;
  ms_double elapsed{0};  // from starting to send the request to the last byte of the response

  const std::string* header(std::string_view name) const;
  boost::json::value json() const;  // the body parsed; throws on invalid JSON
};

// One keep-alive connection; requests are sent one after another on it.
class http_connection {
 public:
  // tls: HTTPS without certificate verification (the mock's self-signed test certificates).
  explicit http_connection(std::uint16_t port, std::chrono::milliseconds timeout = default_timeout,
                           bool tls = false);
  ~http_connection();
  http_connection(const http_connection&) = delete;
  http_connection& operator=(const http_connection&) = delete;

  // A body without a content-type header is sent as application/json.
  http_response request(std::string_view method, std::string_view target,
                        std::string_view body = {}, const header_map& headers = {},
                        std::chrono::milliseconds timeout = default_timeout);
  // Whether the server has not closed (or announced closing) the connection.
  bool is_open() const;
  void close();

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

// One request on a fresh connection.
http_response request(std::string_view method, std::uint16_t port, std::string_view target,
                      std::string_view body = {}, const header_map& headers = {},
                      std::chrono::milliseconds timeout = default_timeout);
http_response https_request(std::string_view method, std::uint16_t port, std::string_view target,
                            std::string_view body = {}, const header_map& headers = {},
                            std::chrono::milliseconds timeout = default_timeout);

// ---- streamed responses ------------------------------------------------------------------

struct stream_piece {
  std::string bytes;  // decoded body bytes (chunk framing removed)
  test_clock::time_point at;
};

enum class stream_end {
  complete,       // the whole response arrived
  stopped,        // we closed early: close_after, close_after_bytes or on_piece said stop
  server_closed,  // the server closed or reset before the response was complete
  timed_out,      // options.timeout passed first
};

struct stream_options {
  std::chrono::milliseconds timeout = default_timeout;  // the whole exchange
  // Simulated client disconnects: close once this much body arrived, or this long after the
  // request was sent (even before the response head), whichever comes first.
  std::optional<std::size_t> close_after_bytes;
  std::optional<std::chrono::milliseconds> close_after;
  bool reset = false;  // close with RST (SO_LINGER 0) instead of FIN
  // Called per piece as it arrives; returning false closes the connection at once.
  std::function<bool(const stream_piece&)> on_piece;
};

struct stream_result {
  int status = 0;  // 0 when no response head arrived
  header_map headers;
  std::vector<stream_piece> pieces;
  std::string body;
  stream_end end = stream_end::timed_out;
  test_clock::time_point sent_at;  // request written
  std::optional<test_clock::time_point> head_at;
  test_clock::time_point ended_at;  // when we closed, or saw the end

  const std::string* header(std::string_view name) const;
  // The payloads of the complete SSE `data:` events in the body, in order.
  std::vector<std::string> sse_data() const;
  // The same events with the name each one's `event:` line gave it ("" when none).
  struct sse_event {
    std::string name;
    std::string data;
  };
  std::vector<sse_event> sse_events() const;
  // For each complete SSE event, the arrival time of the piece that completed it.
  std::vector<test_clock::time_point> sse_event_times() const;
};

// Throws http_error only when the connection or the request write fails.
stream_result stream_request(std::string_view method, std::uint16_t port, std::string_view target,
                             std::string_view body, const header_map& headers,
                             const stream_options& options);

// ---- raw bytes (hostile-input tests) --------------------------------------------------------

class raw_connection {
 public:
  explicit raw_connection(std::uint16_t port, std::chrono::milliseconds timeout = default_timeout);
  ~raw_connection();
  raw_connection(const raw_connection&) = delete;
  raw_connection& operator=(const raw_connection&) = delete;

  // Throws http_error when the bytes cannot all be written within the timeout.
  void send(std::string_view bytes, std::chrono::milliseconds timeout = default_timeout);
  // Whatever is available (waiting up to timeout for the first byte); empty at EOF or timeout.
  std::string read_some(std::chrono::milliseconds timeout = default_timeout);
  // Everything up to and including the first `marker` (or all read so far at EOF/timeout).
  std::string read_until(std::string_view marker,
                         std::chrono::milliseconds timeout = default_timeout);
  // Everything until the server closes; what arrived so far if the timeout passes first.
  std::string read_until_closed(std::chrono::milliseconds timeout = default_timeout);
  // True once the server closed (EOF or reset) was observed by a read.
  bool peer_closed() const;
  // Waits up to timeout for the server to close, discarding any bytes; true if it did.
  bool wait_closed(std::chrono::milliseconds timeout);
  void close(bool reset = false);

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace tether::test
