#include "actors/connection_actor.hpp"

#include "actors/messages.hpp"

#include <mutex>

namespace tether {
namespace {

// net/ calls these on an io thread; each becomes a message. The response (head, body, end,
// failure) goes straight to the attempt actor, which alone reads it: one hop per event instead
// of two through this actor. The socket's end goes to the connection actor, whose strong handle
// keeps it alive until then: on_closed is net's last call.
// A response that is not an event stream is held here until it is complete and sent as one
// message (two fewer per request); one that outgrows hold_limit is passed on as it comes. Such a
// body is also held to max_response_bytes here, on the io thread: past it the exchange is
// cancelled at once, not when the attempt actor gets round to counting (under load the io thread
// runs ahead of the actors, and the upstream would be read to its end meanwhile). An event stream
// is never held or limited.
class relay_events final : public net::upstream_events {
 public:
  static constexpr std::size_t hold_limit = 64 * 1024;

  relay_events(caf::actor owner, caf::actor attempt, std::uint64_t max_body)
      : owner_(std::move(owner)), attempt_(std::move(attempt)), max_body_(max_body) {}

  // The exchange this relays, known only once it has started (its first callback may come
  // before): cancelled at once if the limit was already passed.
  void attach(const std::shared_ptr<net::upstream_exchange>& exchange) {
    bool cancel_now = false;
    {
      std::lock_guard lock{mutex_};
      exchange_ = exchange;
      cancel_now = over_limit_;
    }
    if (cancel_now) exchange->cancel();
  }

  // Nothing downstream needs it yet; not sending it saves two messages per request.
  void on_connected(bool) override {}
  void on_head(int status, net::header_list headers) override {
    const auto* type = net::find_header(headers, "content-type");
    if (type != nullptr && type->find("text/event-stream") != std::string::npos) {
      event_stream_ = true;
      caf::anon_send(attempt_, up_head_atom::value, status, std::move(headers));
      return;
    }
    holding_ = true;
    status_ = status;
    headers_ = std::move(headers);
  }
  void on_body(std::string bytes) override {
    if (refused_) return;
    received_ += bytes.size();
    if (!event_stream_ && max_body_ > 0 && received_ > max_body_) return refuse();
    if (holding_ && body_.size() + bytes.size() <= hold_limit) {
      body_ += bytes;
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
  void on_end() override {
    if (refused_) return;
    if (holding_) {
      holding_ = false;
      caf::anon_send(attempt_, up_whole_atom::value, status_, std::move(headers_),
                     std::move(body_));
      return;
    }
    caf::anon_send(attempt_, up_end_atom::value);
  }
  void on_failure(net::upstream_failure kind, std::string message) override {
    if (refused_) return;
    // A held head is dropped with the response: the attempt treats a failure alike either way.
    caf::anon_send(attempt_, up_fail_atom::value, static_cast<std::int32_t>(kind),
                   std::move(message));
  }
  void on_closed() override {
    attempt_ = nullptr;
    auto owner = std::move(owner_);
    caf::anon_send(owner, up_closed_atom::value, now_ns());
  }

 private:
  void refuse() {
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

  caf::actor owner_;
  caf::actor attempt_;
  const std::uint64_t max_body_;
  // io-thread state (net/ calls one exchange's callbacks one at a time)
  bool event_stream_ = false;
  bool holding_ = false;
  bool refused_ = false;
  std::uint64_t received_ = 0;
  int status_ = 0;
  net::header_list headers_;
  std::string body_;
  // shared with the connection actor's attach()
  std::mutex mutex_;
  bool over_limit_ = false;
  std::weak_ptr<net::upstream_exchange> exchange_;
};

struct connection_state {
  std::shared_ptr<net::upstream_exchange> exchange;
  bool answered = false;  // the budget's first answer decides; a later one is a duplicate
  bool granted = false;
  bool closing = false;
  bool closed = false;
  std::int64_t asked_ns = 0;
  std::int64_t queue_wait_ns = 0;  // asked → the budget's answer; 0 if none came
};

}  // namespace

caf::behavior connection_actor(caf::event_based_actor* self, runtime_ptr rt, caf::actor attempt,
                               caf::actor request, connection_spec spec) {
  auto st = std::make_shared<connection_state>();
  auto upstream = spec.upstream;
  auto hub = spec.hub;
  const auto max_response_bytes = spec.max_response_bytes;

  // The socket's end is this actor's end: report it, then exit, which frees the budget slot.
  auto finish = [self, st, request, upstream](std::int64_t closed_ns) {
    if (st->closed) return;
    st->closed = true;
    self->send(request, work_ended_atom::value, static_cast<std::uint64_t>(upstream), closed_ns,
               st->granted, st->queue_wait_ns);
    self->quit();
  };

  auto cancel = [st, finish] {
    if (st->closing || st->closed) return;
    st->closing = true;
    if (st->exchange) {
      st->exchange->cancel();  // net answers with on_closed once the socket is closed
    } else {
      finish(now_ns());  // still queued or never started: nothing to close
    }
  };

  // Whatever the parent's reason, the work stops; the close is awaited, not assumed.
  self->set_exit_handler([cancel](caf::exit_msg& msg) {
    if (msg.reason == caf::exit_reason::normal) return;
    cancel();
  });

  // Backstop: however this actor ends (an exception, an unexpected kill), the socket closes.
  self->attach_functor([st](const caf::error&) {
    if (st->exchange && !st->closed) st->exchange->cancel();
  });

  st->asked_ns = now_ns();
  self->send(rt->budget, acquire_atom::value, static_cast<std::uint64_t>(spec.upstream), spec.key,
             spec.priority);

  auto request_to_send = std::make_shared<net::upstream_request>(std::move(spec.request));

  return {
      [self, rt, st, attempt, request_to_send, upstream, hub, max_response_bytes, finish](
          grant_atom, bool granted, const std::string& reason) {
        // A second answer comes only when a lost budget host's claims were re-asked locally
        // (budget_link_actor); the local budget counts this actor either way.
        if (st->closing || st->closed || st->answered) return;
        st->answered = true;
        st->queue_wait_ns = now_ns() - st->asked_ns;
        self->send(attempt, queued_atom::value, st->queue_wait_ns);
        if (!granted) {
          self->send(attempt, up_fail_atom::value, up_fail_overloaded, reason);
          finish(now_ns());
          return;
        }
        st->granted = true;
        auto events = std::make_shared<relay_events>(caf::actor_cast<caf::actor>(self), attempt,
                                                     max_response_bytes);
        st->exchange = rt->upstreams[upstream]->start(std::move(*request_to_send), events);
        events->attach(st->exchange);
        // The caller may have left while this waited for its slot: then the hub cancels it now.
        if (hub) hub->add(st->exchange);
      },
      [finish](up_closed_atom, std::int64_t closed_ns) { finish(closed_ns); },
  };
}

}  // namespace tether
