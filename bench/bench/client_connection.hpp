// One keep-alive HTTP/1.1 connection of the load generator. It times what a caller observes: the
// response head, every SSE event as it arrives, the end; and it can be closed at any moment to
// play a caller who leaves. All on one io_context thread: no locking anywhere in the bench.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace tether::bench {

using steady = std::chrono::steady_clock;

double ms_between(steady::time_point from, steady::time_point to);
// Wall-clock epoch ms: the mock's time base, so the bench can compare its clock with the mock's.
double epoch_ms_now();

struct exchange_result {
  bool ok = false;  // a whole response was read
  unsigned status = 0;
  double sent_epoch_ms = 0;
  double latency_ms = 0;  // from starting to write the request to the end (or the failure)
  std::optional<double> head_ms;
  std::vector<double> event_ms;  // arrival of each SSE data event ([DONE] excluded), from send
  // With stamp_arrivals: when the response's last bytes reached this host (the kernel's receive
  // timestamp), from send. latency_ms is when this one-threaded load generator got round to them.
  std::optional<double> arrived_ms;
  std::string error;
};

// The bytes of a whole request; built once and shared by every connection that sends it.
std::shared_ptr<const std::string> make_request(const std::string& host, const std::string& path,
                                                const std::string& body,
                                                const std::vector<std::string>& extra_headers = {});
std::string chat_body(const std::string& model, bool stream);

class client_connection : public std::enable_shared_from_this<client_connection> {
 public:
  using done_fn = std::function<void(exchange_result&)>;

  client_connection(boost::asio::io_context& ioc, boost::asio::ip::tcp::endpoint target);
  ~client_connection();

  // Connects if needed, sends, reads the whole response; on_done runs exactly once (unless the
  // connection is aborted first, which ends the exchange without calling it).
  void exchange(std::shared_ptr<const std::string> request, done_fn on_done);
  // Reads with recvmsg and the kernel's receive timestamps (exchange_result::arrived_ms): for a
  // burst of answers, whose last ones would otherwise be timed after the bench has parsed all
  // the others. One more syscall per read, so only where a scenario needs it.
  void stamp_arrivals();
  // Called with the result so far when the first SSE event arrives (for callers that act on it).
  void on_first_event(std::function<void()> fn);
  // Called with each SSE data event ([DONE] excluded, its bytes up to the blank line) as it is
  // read, and the epoch ms of the read that completed it: for events carrying their sender's
  // clock. Kept across exchanges.
  using event_fn = std::function<void(std::string_view event, double read_epoch_ms)>;
  void on_event(event_fn fn);
  // The caller leaves: the socket is closed now. Returns the epoch ms just before the close.
  double abort();
  bool busy() const;
  std::size_t events_seen() const;

 private:
  void do_write(std::uint64_t gen);
  void do_read(std::uint64_t gen);
  void on_read(std::uint64_t gen, boost::system::error_code ec);
  void on_readable(std::uint64_t gen, boost::system::error_code ec);
  void finish(std::uint64_t gen, bool ok, std::string error);

  struct state;
  std::unique_ptr<state> st_;
};

}  // namespace tether::bench
