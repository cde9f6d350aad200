#include "actors/relay_events.hpp"

#include "actors/messages.hpp"

namespace tether {

bool relayed_as_stream(bool asked, int status, const net::header_list& headers) {
  if (!asked || status < 200 || status >= 300) return false;
  const auto* type = net::find_header(headers, "content-type");
  return type != nullptr && type->find("text/event-stream") != std::string::npos;
}

relay_events::relay_events(caf::actor owner, caf::actor attempt, bool stream,
                           std::uint64_t max_body)
    : owner_(std::move(owner)),
      attempt_(std::move(attempt)),
      stream_(stream),
      max_body_(max_body) {}

void relay_events::attach(const std::shared_ptr<net::upstream_exchange>& exchange) {
  bool cancel_now = false;
  {
    std::lock_guard lock{mutex_};
    exchange_ = exchange;
    cancel_now = over_limit_;
  }
  if (cancel_now) exchange->cancel();
}

// Nothing downstream needs it yet; not sending it saves two messages per request.
void relay_events::on_connected(bool) {
  connected_ = true;
}

void relay_events::on_head(int status, net::header_list headers) {
  head_ns_ = now_ns();
  if (relayed_as_stream(stream_, status, headers)) {
    relayed_as_stream_ = true;
    caf::anon_send(attempt_, up_head_atom::value, status, std::move(headers));
    return;
  }
  holding_ = true;
  status_ = status;
  headers_ = std::move(headers);
}

void relay_events::on_body(std::string bytes) {
  if (refused_) return;
  received_ += bytes.size();
  if (!relayed_as_stream_ && max_body_ > 0 && received_ > max_body_) return refuse();
  if (holding_ && body_.size() + bytes.size() <= hold_limit) {
    // Most bodies come in one piece: taken as it is, not copied.
    if (body_.empty()) {
      body_ = std::move(bytes);
    } else {
      body_ += bytes;
    }
    return;
  }
  if (holding_) {
    holding_ = false;
    caf::anon_send(attempt_, up_head_atom::value, status_, std::move(headers_));
    body_ += bytes;
    caf::anon_send(attempt_, up_body_atom::value, std::move(body_));
    return;
  }
  caf::anon_send(attempt_, up_body_atom::value, std::move(bytes));
}

void relay_events::on_end() {
  answer_over_ = true;
  if (refused_) return;
  if (holding_) {
    holding_ = false;
    caf::anon_send(attempt_, up_whole_atom::value, status_, std::move(headers_), std::move(body_));
    return;
  }
  caf::anon_send(attempt_, up_end_atom::value);
}

void relay_events::on_failure(net::upstream_failure kind, std::string message) {
  answer_over_ = true;
  if (refused_) return;
  // A held head is dropped with the response: the attempt treats a failure alike either way.
  caf::anon_send(attempt_, up_fail_atom::value, static_cast<std::int32_t>(kind),
                 std::move(message));
}

void relay_events::on_closed() {
  attempt_ = nullptr;
  caf::anon_send(owner_, up_closed_atom::value, now_ns(), head_ns_, connected_ && !answer_over_);
  owner_ = nullptr;
}

void relay_events::refuse() {
  refused_ = true;
  holding_ = false;
  body_.clear();
  caf::anon_send(attempt_, up_fail_atom::value, up_fail_too_large,
                 std::string{"upstream response is larger than request.max_response_bytes"});
  std::shared_ptr<net::upstream_exchange> exchange;
  {
    std::lock_guard lock{mutex_};
    over_limit_ = true;
    exchange = exchange_.lock();
  }
  if (exchange) exchange->cancel();
}

}  // namespace tether
