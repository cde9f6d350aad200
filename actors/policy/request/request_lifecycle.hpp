// The decisions of one request's life, from arrival to the end of its last upstream connection:
// events in, commands out. The request actor feeds it what happened (an attempt's answer or
// failure, a timer, the caller leaving, the drain, a connection's end) and carries out what it
// returns (answer, relay, start or cancel an attempt, arm a timer, write the access line and
// quit). It composes retry_policy, request_deadline and outcome, and counts the request into the
// router and the retry budget; it holds no actor, socket or clock, so tests drive every race
// through it directly.
//
//   start ──▶ attempting ◀──────────── backing_off
//     │         │   │  └─ retryable failure ──▶ ┘   (retry_policy, retry_budget)
//     │         │   └─ committed stream ──▶ streaming ──▶ answered
//     │         └─ response / final failure ───────────▶ answered
//     ├─ budget already spent (0) ─────────────────────▶ answered
//     └─ key rate-limited ──▶ admitting ──(admitted)──▶ attempting
//                               └──(refused: 429)─────▶ answered
//   any state: deadline | client gone | drain ──▶ cancel the attempt ──▶ answered
//   attempting: an upstream failure within the deadline's propagation margin ──▶ answered (504)
//   attempting: a stale pooled connection ──▶ attempting (the same deployment, a new connection)
//   answered ──(every attempt and connection ended)──▶ finish
//
// The caller is answered exactly once: every path to `answered` goes through one function
// (close_caller_side), and every event after it only counts ends.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "actors/policy/request/deadline.hpp"
#include "actors/policy/request/outcome.hpp"
#include "actors/policy/request/retry_policy.hpp"
#include "actors/policy/request/stop_reason.hpp"
#include "actors/policy/routing/route_kind.hpp"
#include "config/config.hpp"

namespace tether {

class router;
class retry_budget;
class upstream_health;

struct lifecycle_command {
  enum class kind : std::uint8_t {
    arm_deadline,      // at `at`: on_deadline
    check_admission,   // ask the budget whether the key's rate admits the request: on_admission
    start_attempt,     // `attempt` on `deployment` (of `upstream`), per-try timeout `delay`
                       // (0 = none), `deadline_left` to pass on (what is left less the
                       // propagation margin; nullopt = unbounded), its
                       // socket closed at `close_at` (the deadline; nullopt = unbounded)
    cancel_attempt,    // stop attempt `attempt` with `reason`; `behind_answers`: the deadline's
                       // answer was just written, so the stop may queue behind others' answers
    arm_backoff,       // after `delay`: on_backoff_due(`generation`)
    send_response,     // the attempt's complete response goes to the caller as it is
    start_stream,      // the attempt's stream is committed: its head goes to the caller
    end_stream,        // the stream ended cleanly
    send_error,        // a gateway-made error: `result`, `status`, `message`, `retry_after`
    interrupt_stream,  // mid-stream: one error event (`type`, `message`), then the end
    attempt_over,      // the current attempt's record ends with `result` (and `status` if > 0)
    retry_asked,       // the retry budget of `upstream` was asked: `granted`
    caller_side_over,  // the caller's side is over: result() and status() are final
    finish,            // every piece of work has ended: log and quit
  } what = kind::finish;
  outcome result = outcome::ok;
  int status = 0;
  std::uint32_t attempt = 0;
  std::size_t deployment = 0;
  std::size_t upstream = 0;
  bool granted = false;
  bool behind_answers = false;
  // start_attempt: on a new connection, never a pooled one (the resend of a stale one).
  bool fresh_connection = false;
  // attempt_over: the attempt's pooled connection was closed by the upstream before it could
  // read the request (logged as the attempt's outcome `stale_connection`).
  bool stale_connection = false;
  // start_attempt: how the router chose its deployment (none: not counted).
  route_kind route = route_kind::none;
  stop_reason reason = stop_reason::deadline;
  std::uint64_t generation = 0;
  millis delay{0};
  steady_time at{};
  std::optional<millis> retry_after;
  std::optional<millis> deadline_left;
  std::optional<steady_time> close_at;
  std::string_view type;
  std::string message;
};

class request_lifecycle {
 public:
  using commands = boost::container::small_vector<lifecycle_command, 6>;
  using random_source = std::function<std::uint64_t()>;

  // `chain`: the model asked for, then its fallbacks (router::chain_of). The router, the retry
  // budget, the upstreams' health and the configuration outlive the lifecycle. `random` feeds
  // the router's draws (default: route_random).
  request_lifecycle(const config::gateway_config& cfg, const router& routes, retry_budget& retries,
                    upstream_health& health, const std::vector<std::string>& chain, surface where,
                    request_deadline deadline, retry_policy::jitter_source jitter = {},
                    random_source random = {});
  ~request_lifecycle();
  request_lifecycle(const request_lifecycle&) = delete;
  request_lifecycle& operator=(const request_lifecycle&) = delete;

  // Each event returns what to do, in order; the list is valid until the next event.
  const commands& start(steady_time now);
  // Before start: the request continues a response that `upstream` made (previous_response_id),
  // so every attempt on the requested model goes to its deployment there while that upstream is
  // in service (the conversation's state is there); after that, or on a fallback, as usual.
  void prefer_upstream(std::size_t upstream) { preferred_upstream_ = upstream; }
  // Before start: the request's affinity key (actors/policy/wire/affinity_key.hpp), which places
  // its first attempt on a model with routing = "prefix".
  void set_affinity(std::uint64_t key) { affinity_ = key; }
  // Before start: the request's key has a rate limit, so no attempt starts before the budget's
  // verdict (on_admission).
  void await_admission() { admission_pending_ = true; }
  // Before start: the request is a client's retry of a call whose deadline it keeps
  // (call_table.hpp); a spent one is then said to be the call's, not the caller's header's.
  void retry_of_call() { retry_of_call_ = true; }
  // Before start: the call's earlier tries spent `attempts` at an upstream, so this try's first
  // model retries only what they left of its max_retries; at least one attempt is still made
  // (a call whose attempts are all spent is answered by out_of_attempts instead). Fallbacks keep
  // their own.
  void carry_attempts(std::uint32_t attempts) {
    model_attempts_ = std::min(attempts, settings_.max_retries);
  }
  // Before start: the call's earlier tries spent every attempt it may have and the last ended
  // `last` at the upstream: this try is answered at once with that outcome, no attempt.
  void out_of_attempts(outcome last) { spent_call_ = last; }
  bool call_out_of_attempts() const { return spent_call_.has_value(); }
  // The attempts that reached an upstream (the resend of a stale pooled connection is not one).
  std::uint32_t upstream_attempts() const { return attempts_started_ - resent_; }
  // The budget's verdict: admitted, the first attempt starts; refused, the caller is answered with
  // `why` (rate_limited, or bad_request when it could never fit), `message` and `retry_after`.
  const commands& on_admission(bool admitted, outcome why, std::string message,
                               std::optional<millis> retry_after, steady_time now);
  bool admitting() const { return phase_ == phase::admitting; }
  // The upstream of the attempt started last (whose answer is the one being relayed).
  std::size_t current_upstream() const { return current_upstream_; }
  const commands& on_response(int status, std::optional<millis> retry_after, steady_time now);
  const commands& on_stream_head(int status);
  const commands& on_stream_end();
  const commands& on_attempt_failed(attempt_end kind, std::string_view message, bool committed,
                                    steady_time now);
  // The attempt's actor has ended (after its report, or without one: then it failed).
  const commands& on_attempt_exited(std::uint32_t attempt, steady_time now);
  const commands& on_backoff_due(std::uint64_t generation, steady_time now);
  const commands& on_deadline();
  const commands& on_client_gone();
  const commands& on_drain();
  // An attempt's connection has ended (its socket closed, or it never opened one). Every
  // attempt has exactly one connection, counted when the attempt starts.
  const commands& on_connection_ended();

  // Whether a stream event from the attempt goes to the caller now.
  bool relays_events() const { return phase_ == phase::streaming; }
  bool answered() const { return phase_ == phase::answered; }
  outcome result() const { return result_; }
  int status() const { return status_; }
  // The current model's settings (its [request] overrides applied).
  const config::request_config& settings() const { return settings_; }
  const request_deadline& deadline() const { return deadline_; }
  const std::string& model() const { return (*chain_)[chain_pos_]; }
  std::uint32_t attempts_started() const { return attempts_started_; }

 private:
  enum class phase { admitting, attempting, backing_off, streaming, answered };

  commands& begin();
  void start_attempt(steady_time now);
  void send_again(steady_time now);
  void launch_attempt(std::size_t deployment, bool fresh_connection, steady_time now,
                      route_kind route = route_kind::none);
  void after_failure(const attempt_report& report, std::string_view message, steady_time now);
  void after_too_heavy(const attempt_report& report, std::string_view message, steady_time now);
  void release_attempt();
  bool choose_deployment(steady_time now);
  void move_to_model(std::size_t pos);
  void cancel_attempt(stop_reason reason);
  void end_by_deadline(int status);
  const commands& stop_from_above(outcome why, stop_reason reason, std::string_view what);
  void answer_error(outcome o, std::string message, std::optional<millis> retry_after = {});
  void interrupt_stream(std::string_view type, std::string message);
  void attempt_over(outcome o, int status = 0);
  void close_caller_side(outcome o, int status);
  void return_retry_token();
  void maybe_finish();

  const config::gateway_config& cfg_;
  const router& routes_;
  retry_budget& retries_;
  upstream_health& health_;
  const std::vector<std::string>* chain_;
  surface where_;  // the request's surface: only deployments serving it are tried
  std::optional<std::size_t> preferred_upstream_;
  std::optional<std::uint64_t> affinity_;
  bool admission_pending_ = false;
  bool retry_of_call_ = false;
  std::optional<outcome> spent_call_;
  request_deadline deadline_;
  retry_policy::jitter_source jitter_;
  random_source random_;
  config::request_config settings_;

  phase phase_ = phase::attempting;
  bool finished_ = false;
  std::size_t chain_pos_ = 0;
  std::uint32_t model_attempts_ = 0;
  retry_policy::history history_;
  std::string last_failure_;  // the message of the last attempt that reached an upstream
  // The deployments this model's attempts tried, so a retry prefers another.
  boost::container::small_vector<std::size_t, 4> tried_;
  // The deployments whose token cap refused the request: never chosen again.
  boost::container::small_vector<std::size_t, 2> too_heavy_;
  // The attempt that may still report, and where it went (its upstream hears of its end).
  std::optional<std::uint32_t> current_;
  std::size_t current_deployment_ = 0;
  std::size_t current_upstream_ = 0;
  std::size_t next_deployment_ = 0;           // choose_deployment's answer
  route_kind next_route_ = route_kind::none;  // and how the router made it
  std::uint32_t attempts_started_ = 0;
  std::uint32_t resent_ = 0;  // of attempts_started_: resends of a stale pooled connection
  std::uint32_t attempts_live_ = 0;
  std::uint64_t backoff_generation_ = 0;
  // The retry token held from the retry decision through the backoff and the retry attempt.
  std::optional<std::size_t> retry_token_;
  // The upstreams this request counts among their requests in the retry budget.
  boost::container::small_vector<std::size_t, 2> joined_;
  std::uint32_t connections_started_ = 0;
  std::uint32_t connections_ended_ = 0;

  outcome result_ = outcome::internal_error;
  int status_ = 0;
  commands out_;
};

}  // namespace tether
