#include "actors/connection_actor.hpp"

#include "actors/messages.hpp"
#include "actors/one_way.hpp"
#include "actors/policy/slot_refusal.hpp"
#include "actors/relay_events.hpp"

#include <optional>

namespace tether {
namespace {

// The actor's state lives in the actor object: one allocation for both, and none for the
// arguments (a function-based actor carries them in a heap tuple to its first run).
class connection_actor final : public caf::event_based_actor {
 public:
  connection_actor(caf::actor_config& cfg, runtime_ptr rt, caf::actor attempt, caf::actor request,
                   connection_spec spec)
      : caf::event_based_actor(cfg),
        rt_(std::move(rt)),
        attempt_(std::move(attempt)),
        request_(std::move(request)),
        spec_(std::move(spec)) {}

  caf::behavior make_behavior() override {
    // Whatever the parent's reason, the work stops; the close is awaited, not assumed.
    set_exit_handler([this](caf::exit_msg& msg) {
      if (msg.reason != caf::exit_reason::normal) cancel();
    });
    // However this actor ends (normally, an exception, an unexpected kill), the request hears of
    // the end: it waits for one work_ended per connection its attempts started, so the report is
    // sent from here rather than before a quit that may not be reached. (One message instead of
    // the report plus the down_msg of a monitor.) It runs in the actor's cleanup, after on_exit;
    // CAF runs the newest attachable first, so the budget's monitor, set later, fires before it.
    attach_functor([this](const caf::error&) { report_end(); });
    ask_for_slot();
    return {
        one_way([this](grant_atom, std::int32_t refusal, const std::string& reason) {
          budget_answered(static_cast<slot_refusal>(refusal), reason);
        }),
        one_way([this](up_closed_atom, std::int64_t closed_ns) { finish(closed_ns); }),
    };
  }

  // Every end passes here first (CAF calls it on a quit and on an unreachable actor's
  // destruction): a socket still open is closed, and the handles this actor holds go now, not
  // when the last handle on it does (the exchange's events hold one until net's last call).
  void on_exit() override {
    if (exchange_ && !closed_) exchange_->cancel();
    exchange_.reset();
    attempt_ = nullptr;
    rt_.reset();
  }

 private:
  void ask_for_slot();
  void budget_answered(slot_refusal refusal, const std::string& reason);
  void cancel();
  void finish(std::int64_t at_ns);
  void report_end();

  runtime_ptr rt_;
  caf::actor attempt_;
  caf::actor request_;
  connection_spec spec_;
  std::shared_ptr<net::upstream_exchange> exchange_;
  bool answered_ = false;  // the budget's first answer decides; a later one is a duplicate
  bool granted_ = false;
  bool closing_ = false;
  bool closed_ = false;
  std::optional<std::int64_t> closed_ns_;
  std::int64_t asked_ns_ = 0;
  std::int64_t queue_wait_ns_ = 0;  // asked → the budget's answer, or → the end if none came
};

void connection_actor::ask_for_slot() {
  asked_ns_ = now_ns();
  send(spec_.budget ? spec_.budget : rt_->budget, acquire_atom::value,
       static_cast<std::uint64_t>(spec_.upstream), spec_.key, spec_.rank, spec_.tokens);
}

// The exchange starts only with a slot: no socket is opened for work the budget has not counted.
void connection_actor::budget_answered(slot_refusal refusal, const std::string& reason) {
  // A second answer comes only when a lost budget host's claims were re-asked locally
  // (budget_link_actor); the local budget counts this actor either way.
  if (closing_ || closed_ || answered_) return;
  answered_ = true;
  queue_wait_ns_ = now_ns() - asked_ns_;
  if (refusal != slot_refusal::none) {
    send(attempt_, up_fail_atom::value,
         refusal == slot_refusal::stopping ? up_fail_shutting_down : up_fail_overloaded, reason);
    finish(now_ns());
    return;
  }
  granted_ = true;
  if (spec_.tell_grant) send(attempt_, granted_atom::value);
  auto events = std::make_shared<relay_events>(caf::actor_cast<caf::actor>(this), attempt_,
                                               spec_.stream, spec_.max_response_bytes);
  exchange_ =
      rt_->upstreams[spec_.upstream]->start(std::move(spec_.request), events, spec_.affinity);
  events->attach(exchange_);
}

void connection_actor::cancel() {
  if (closing_ || closed_) return;
  closing_ = true;
  if (exchange_) {
    exchange_->cancel();  // net answers with on_closed once the socket is closed
  } else {
    finish(now_ns());  // still queued or never started: nothing to close
  }
}

// The socket's end is this actor's end: the exit frees the budget slot (the budget's monitor)
// and reports the work's end to the request (report_end).
void connection_actor::finish(std::int64_t at_ns) {
  if (closed_) return;
  closed_ = true;
  // Ended while still queued (the tree was cancelled): the whole wait was queue wait.
  if (!answered_) queue_wait_ns_ = at_ns - asked_ns_;
  closed_ns_ = at_ns;
  quit();
}

void connection_actor::report_end() {
  const auto ended_ns = closed_ns_.value_or(now_ns());
  if (!answered_) queue_wait_ns_ = ended_ns - asked_ns_;
  caf::anon_send(request_, work_ended_atom::value, static_cast<std::uint64_t>(spec_.upstream),
                 spec_.attempt_index, ended_ns, granted_, queue_wait_ns_);
  request_ = nullptr;
}

}  // namespace

caf::actor spawn_connection(caf::event_based_actor* attempt, runtime_ptr rt, caf::actor request,
                            connection_spec spec) {
  return attempt->spawn<connection_actor, caf::linked>(
      std::move(rt), caf::actor_cast<caf::actor>(attempt), std::move(request), std::move(spec));
}

}  // namespace tether
