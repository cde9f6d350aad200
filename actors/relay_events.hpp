// How net/ reports one upstream exchange to the actors. net/ calls these on an io thread; each
// becomes a message. The response (head, body, end, failure) goes straight to the attempt actor,
// which alone reads it: one hop per event instead of two through the connection actor. The
// socket's end goes to the connection actor (the owner), whose strong handle keeps it alive until
// then: on_closed is net's last call.
//
// A response that is not an event stream is held here until it is complete and sent as one
// message (up_whole: two fewer per request); one that outgrows hold_limit is passed on as it
// comes. Such a body is also held to max_response_bytes here, on the io thread: past it the
// exchange is cancelled at once, not when the attempt actor gets round to counting (under load
// the io thread runs ahead of the actors, and the upstream would be read to its end meanwhile).
// What the attempt relays event by event (a 2xx event stream to a caller who asked for one) is
// never held or limited; the attempt draws the same line.
#pragma once

#include <caf/all.hpp>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "net/upstream.hpp"

namespace tether {

// The line both this relay and the attempt draw: a response is relayed to the caller event by
// event only when it is a 2xx event stream and the caller asked for a stream. An upstream that
// ignores `stream: true` and answers plain JSON is passed on whole, like any other response.
bool relayed_as_stream(bool asked, int status, const net::header_list& headers);

class relay_events final : public net::upstream_events {
 public:
  static constexpr std::size_t hold_limit = 64 * 1024;

  // stream: the caller asked for an event stream. max_body: 0 = no limit.
  relay_events(caf::actor owner, caf::actor attempt, bool stream, std::uint64_t max_body);

  // The exchange this relays, known only once it has started (its first callback may come
  // before): cancelled at once if the limit was already passed.
  void attach(const std::shared_ptr<net::upstream_exchange>& exchange);

  void on_connected(bool reused) override;
  void on_head(int status, net::header_list headers) override;
  void on_body(std::string bytes) override;
  void on_end() override;
  void on_failure(net::upstream_failure kind, std::string message) override;
  void on_closed() override;

 private:
  void refuse();

  caf::actor owner_;
  caf::actor attempt_;
  const bool stream_;
  const std::uint64_t max_body_;
  // io-thread state (net/ calls one exchange's callbacks one at a time)
  bool relayed_as_stream_ = false;
  bool holding_ = false;
  bool refused_ = false;
  std::uint64_t received_ = 0;
  int status_ = 0;
  // When the head arrived (now_ns), 0 if none did: passed on with the close, for the access line.
  std::int64_t head_ns_ = 0;
  // Passed on with the close as "cut": the request went out (the connection was made) and the
  // exchange closed before the answer's end and without the upstream's failure, so the engine
  // may still be working on it (actors/policy/engine/release_grace.hpp).
  bool connected_ = false;
  bool answer_over_ = false;
  net::header_list headers_;
  std::string body_;
  // shared with attach(), called from the connection actor
  std::mutex mutex_;
  bool over_limit_ = false;
  std::weak_ptr<net::upstream_exchange> exchange_;
};

}  // namespace tether
