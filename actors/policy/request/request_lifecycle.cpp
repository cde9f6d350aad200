#include "actors/policy/request/request_lifecycle.hpp"

#include <algorithm>

#include "actors/policy/request/retry_budget.hpp"
#include "actors/policy/routing/router.hpp"
#include "actors/policy/routing/upstream_health.hpp"

namespace tether {

namespace {
using kind = lifecycle_command::kind;

lifecycle_command make(kind k) {
  lifecycle_command c;
  c.what = k;
  return c;
}
}  // namespace

request_lifecycle::request_lifecycle(const config::gateway_config& cfg, const router& routes,
                                     retry_budget& retries, upstream_health& health,
                                     const std::vector<std::string>& chain, surface where,
                                     request_deadline deadline, retry_policy::jitter_source jitter,
                                     random_source random)
    : cfg_(cfg),
      routes_(routes),
      retries_(retries),
      health_(health),
      chain_(&chain),
      where_(where),
      deadline_(deadline),
      jitter_(std::move(jitter)),
      random_(random ? std::move(random) : random_source{route_random}) {
  if (!chain_->empty()) settings_ = cfg_.effective_request(chain_->front());
}

// Whatever ends the actor, the shared counts it took are given back.
request_lifecycle::~request_lifecycle() {
  release_attempt();
  return_retry_token();
  for (auto up : joined_) retries_.request_left(up);
}

request_lifecycle::commands& request_lifecycle::begin() {
  out_.clear();
  return out_;
}

// ---- events --------------------------------------------------------------------------------

const request_lifecycle::commands& request_lifecycle::start(steady_time now) {
  begin();
  if (deadline_.budget() && deadline_.budget()->count() == 0) {
    // A spent budget reaches no upstream.
    answer_error(outcome::deadline_exceeded,
                 retry_of_call_ ? "this call's deadline was spent by its earlier tries; a retry "
                                  "of it gets only what is left of the first try's deadline"
                                : "the caller's deadline budget is already spent");
    maybe_finish();
    return out_;
  }
  if (spent_call_) {
    // The upstream already did this call's work for one budget: a client that retries anyway
    // gets the same answer again, not a second budget.
    answer_error(*spent_call_,
                 "this call's upstream attempts (max_retries + 1) were spent by its earlier "
                 "tries; a retry of it within call_window_ms makes no new attempt");
    maybe_finish();
    return out_;
  }
  if (auto due = deadline_.due()) {
    auto c = make(kind::arm_deadline);
    c.at = *due;
    out_.push_back(std::move(c));
  }
  if (admission_pending_) {
    // The deadline runs while the verdict is on its way; the caller may leave meanwhile.
    phase_ = phase::admitting;
    out_.push_back(make(kind::check_admission));
    return out_;
  }
  start_attempt(now);
  maybe_finish();
  return out_;
}

const request_lifecycle::commands& request_lifecycle::on_admission(
    bool admitted, outcome why, std::string message, std::optional<millis> retry_after,
    steady_time now) {
  begin();
  if (phase_ != phase::admitting) return out_;  // answered meanwhile (deadline, caller, drain)
  if (admitted) {
    phase_ = phase::attempting;
    start_attempt(now);
  } else {
    answer_error(why, std::move(message), retry_after);
  }
  maybe_finish();
  return out_;
}

const request_lifecycle::commands& request_lifecycle::on_response(int status,
                                                                  std::optional<millis> retry_after,
                                                                  steady_time now) {
  begin();
  if (phase_ != phase::attempting) return out_;  // after a cancel: nobody waits for it
  release_attempt();
  const bool success = status >= 200 && status < 300;
  const bool rejected = status >= 400 && status < 500 && status != 429;
  if (!success && !rejected && status != 429 && deadline_.within_margin(now)) {
    // A chained gateway's 504 for the deadline it inherited, or any failure this close to ours:
    // the deadline's, and no evidence against the upstream.
    end_by_deadline(status);
    maybe_finish();
    return out_;
  }
  // A 4xx is the caller's problem, from an upstream that works; a 429 is neither evidence of
  // health nor of sickness, unless it says for how long to stay away.
  if (success || rejected) {
    health_.attempt_succeeded(current_upstream_);
  } else if (status == 429) {
    if (retry_after) health_.rate_limited(current_upstream_, *retry_after, now);
  } else {
    health_.attempt_failed(current_upstream_, now);
  }
  if (success || rejected) {
    const auto o = success ? outcome::ok : outcome::upstream_rejected;
    attempt_over(o, status);
    auto c = make(kind::send_response);
    c.result = o;
    c.status = status;
    out_.push_back(std::move(c));
    close_caller_side(o, status);
    maybe_finish();
    return out_;
  }
  attempt_over(status == 429 ? outcome::upstream_rate_limited : outcome::upstream_failed, status);
  attempt_report report;
  report.end = attempt_end::response;
  report.status = status;
  report.retry_after = retry_after;
  after_failure(report, "status " + std::to_string(status), now);
  maybe_finish();
  return out_;
}

const request_lifecycle::commands& request_lifecycle::on_stream_head(int status) {
  begin();
  if (phase_ != phase::attempting) return out_;
  health_.attempt_succeeded(current_upstream_);
  phase_ = phase::streaming;
  status_ = status;
  auto c = make(kind::start_stream);
  c.status = status;
  out_.push_back(std::move(c));
  return out_;
}

const request_lifecycle::commands& request_lifecycle::on_stream_end() {
  begin();
  if (phase_ != phase::streaming) return out_;
  release_attempt();
  out_.push_back(make(kind::end_stream));
  attempt_over(outcome::ok, status_);
  close_caller_side(outcome::ok, status_);
  maybe_finish();
  return out_;
}

const request_lifecycle::commands& request_lifecycle::on_attempt_failed(attempt_end end,
                                                                        std::string_view message,
                                                                        bool committed,
                                                                        steady_time now) {
  begin();
  if (phase_ != phase::attempting && phase_ != phase::streaming) return out_;
  if (end == attempt_end::stale_connection && !committed && phase_ == phase::attempting) {
    send_again(now);
    maybe_finish();
    return out_;
  }
  release_attempt();
  const bool upstreams_failure = end == attempt_end::connect_failed || end == attempt_end::reset ||
                                 end == attempt_end::malformed || end == attempt_end::timeout;
  if (upstreams_failure && !committed && phase_ == phase::attempting &&
      deadline_.within_margin(now)) {
    end_by_deadline(0);
    maybe_finish();
    return out_;
  }
  // The upstream's failures count against it; the gateway's own refusals (no slot, a body over
  // the limit) do not.
  if (end != attempt_end::overloaded && end != attempt_end::shutting_down &&
      end != attempt_end::too_large && end != attempt_end::too_heavy) {
    health_.attempt_failed(current_upstream_, now);
  }
  if (committed || phase_ == phase::streaming) {
    attempt_over(outcome::stream_interrupted, status_);
    if (end == attempt_end::timeout) {
      interrupt_stream("timeout_error", "stream interrupted: " + std::string{message});
    } else {
      interrupt_stream("upstream_error",
                       "stream interrupted: upstream ended (" + std::string{message} + ")");
    }
    maybe_finish();
    return out_;
  }
  const outcome o = end == attempt_end::timeout         ? outcome::upstream_timeout
                    : end == attempt_end::overloaded    ? outcome::overloaded
                    : end == attempt_end::too_heavy     ? outcome::overloaded
                    : end == attempt_end::shutting_down ? outcome::shutting_down
                                                        : outcome::upstream_failed;
  attempt_over(o);
  attempt_report report;
  report.end = end;
  after_failure(report, message, now);
  maybe_finish();
  return out_;
}

const request_lifecycle::commands& request_lifecycle::on_attempt_exited(std::uint32_t attempt,
                                                                        steady_time now) {
  begin();
  if (attempts_live_ > 0) --attempts_live_;
  // The current attempt ended without a report: it crashed, a failed attempt. An earlier
  // attempt's end can come after its successor started (a retry without backoff); that one
  // is not current and changes nothing.
  if (current_ && *current_ == attempt) {
    release_attempt();
    if (phase_ == phase::attempting) {
      attempt_over(outcome::internal_error);
      attempt_report report;
      report.end = attempt_end::reset;
      after_failure(report, "attempt ended unexpectedly", now);
    }
  }
  maybe_finish();
  return out_;
}

const request_lifecycle::commands& request_lifecycle::on_backoff_due(std::uint64_t generation,
                                                                     steady_time now) {
  begin();
  if (generation != backoff_generation_ || phase_ != phase::backing_off) return out_;
  start_attempt(now);
  maybe_finish();
  return out_;
}

const request_lifecycle::commands& request_lifecycle::on_deadline() {
  return stop_from_above(outcome::deadline_exceeded, stop_reason::deadline,
                         "the request deadline passed");
}

const request_lifecycle::commands& request_lifecycle::on_client_gone() {
  begin();
  if (phase_ == phase::answered) return out_;
  cancel_attempt(stop_reason::client_gone);
  attempt_over(outcome::client_disconnected);
  close_caller_side(outcome::client_disconnected, 499);  // logged, never sent
  maybe_finish();
  return out_;
}

const request_lifecycle::commands& request_lifecycle::on_drain() {
  return stop_from_above(outcome::shutting_down, stop_reason::drain,
                         "the gateway is shutting down");
}

// The deadline and the drain stop a request alike. The caller's answer comes first (an error
// event mid-stream): it is what the caller is waiting for; the tree's teardown follows at once.
const request_lifecycle::commands& request_lifecycle::stop_from_above(outcome why,
                                                                      stop_reason reason,
                                                                      std::string_view what) {
  begin();
  if (phase_ == phase::answered) return out_;
  const bool streaming = phase_ == phase::streaming;
  attempt_over(why);
  if (streaming) {
    interrupt_stream(error_type_of(why), "stream interrupted: " + std::string(what));
  } else {
    answer_error(why, std::string(what));
  }
  cancel_attempt(reason);
  maybe_finish();
  return out_;
}

const request_lifecycle::commands& request_lifecycle::on_connection_ended() {
  begin();
  ++connections_ended_;
  maybe_finish();
  return out_;
}

// ---- steps ---------------------------------------------------------------------------------

void request_lifecycle::start_attempt(steady_time now) {
  if (deadline_.expired(now)) {
    answer_error(outcome::deadline_exceeded, "the request deadline passed before an attempt");
    return;
  }
  if (chain_pos_ >= chain_->size()) {  // the gateway only starts requests for known models
    answer_error(outcome::internal_error, "no deployment for a configured model");
    return;
  }
  if (!choose_deployment(now)) {
    answer_error(outcome::internal_error, "no deployment for a configured model");
    return;
  }
  tried_.push_back(next_deployment_);
  launch_attempt(next_deployment_, false, now, next_route_);
}

// The upstream had closed the attempt's pooled connection before it could read the request, so
// nothing of it was acted on: no failed attempt. The request goes again at once, to the same
// deployment on a new connection (whose own failure is an ordinary one), as an attempt of its
// own, logged stale_connection; it spends no retry (max_retries, the retry budget: a retry's
// token carries over to the attempt that continues it) and is no evidence against the upstream.
void request_lifecycle::send_again(steady_time now) {
  current_.reset();
  auto over = make(kind::attempt_over);
  over.result = outcome::upstream_failed;
  over.stale_connection = true;
  out_.push_back(std::move(over));
  ++resent_;
  if (deadline_.expired(now)) {
    answer_error(outcome::deadline_exceeded, "the request deadline passed before an attempt");
    return;
  }
  launch_attempt(current_deployment_, true, now);
}

void request_lifecycle::launch_attempt(std::size_t dep, bool fresh_connection, steady_time now,
                                       route_kind route) {
  const auto upstream = routes_.at(dep).upstream;
  if (std::find(joined_.begin(), joined_.end(), upstream) == joined_.end()) {
    retries_.request_joined(upstream);
    joined_.push_back(upstream);
  }
  current_ = attempts_started_++;
  current_deployment_ = dep;
  current_upstream_ = upstream;
  ++attempts_live_;
  ++connections_started_;
  phase_ = phase::attempting;
  auto c = make(kind::start_attempt);
  c.attempt = *current_;
  c.deployment = dep;
  c.upstream = upstream;
  c.delay = deadline_.attempt_timer(settings_.attempt_timeout, now);
  c.deadline_left = deadline_.forwarded(now);
  c.close_at = deadline_.due();
  c.fresh_connection = fresh_connection;
  c.route = route;
  out_.push_back(std::move(c));
}

// A deployment in service for the current model; when the model has none, the first model of
// the chain after it that has one (its fallbacks at once: no attempt is spent on an upstream
// known to be out); with none anywhere, the model whose first deployment is back soonest, its
// attempts spread over all its deployments. A deployment whose token cap refused the request is
// never chosen again.
bool request_lifecycle::choose_deployment(steady_time now) {
  const std::span<const std::size_t> too_heavy{too_heavy_.data(), too_heavy_.size()};
  next_route_ = route_kind::none;
  if (preferred_upstream_ && chain_pos_ == 0 && health_.available(*preferred_upstream_, now)) {
    if (auto dep = routes_.deployment_on(chain_->front(), where_, *preferred_upstream_);
        dep && std::find(too_heavy.begin(), too_heavy.end(), *dep) == too_heavy.end()) {
      next_deployment_ = *dep;
      return true;
    }
  }
  std::optional<std::size_t> soonest_pos;
  route_choice soonest;
  for (auto pos = chain_pos_; pos < chain_->size(); ++pos) {
    const auto tried = pos == chain_pos_
                           ? std::span<const std::size_t>{tried_.data(), tried_.size()}
                           : std::span<const std::size_t>{};
    auto pick = routes_.choose((*chain_)[pos], where_, tried, health_, now, random_(), too_heavy,
                               affinity_);
    if (!pick.deployment) continue;
    if (pick.healthy) {
      if (pos != chain_pos_) move_to_model(pos);
      next_deployment_ = *pick.deployment;
      next_route_ = pick.route;
      return true;
    }
    if (!soonest_pos || pick.available_at < soonest.available_at) {
      soonest_pos = pos;
      soonest = pick;
    }
  }
  if (!soonest_pos) return false;
  if (*soonest_pos != chain_pos_) move_to_model(*soonest_pos);
  next_deployment_ = *soonest.deployment;
  next_route_ = soonest.route;
  return true;
}

// The attempt's failure came within the propagation margin: the caller gets what the deadline
// would have given it a moment later.
void request_lifecycle::end_by_deadline(int status) {
  attempt_over(outcome::deadline_exceeded, status);
  answer_error(outcome::deadline_exceeded, "the request deadline passed");
}

void request_lifecycle::move_to_model(std::size_t pos) {
  chain_pos_ = pos;
  settings_ = cfg_.effective_request((*chain_)[chain_pos_]);
  model_attempts_ = 0;
  tried_.clear();
}

// After an attempt failed before committing: the policy decides, the upstream's retry budget
// may overrule a retry.
void request_lifecycle::after_failure(const attempt_report& report, std::string_view message,
                                      steady_time now) {
  if (report.end == attempt_end::too_heavy) return after_too_heavy(report, message, now);
  history_.record(report);
  last_failure_ = message;
  retry_policy policy{settings_.max_retries, settings_.retry_backoff, jitter_};
  const bool has_fallback = chain_pos_ + 1 < chain_->size();
  const auto remaining = deadline_.remaining(now);
  auto d = policy.decide(report, model_attempts_, remaining, has_fallback);
  if (d.what == retry_decision::action::retry && report.retry_after) {
    // A Retry-After is that deployment's word (it is cooling down now): a retry that another
    // deployment in service can take waits only the usual backoff.
    const auto& model = (*chain_)[chain_pos_];
    if (routes_.any_in_service(model, where_, health_, now)) {
      auto plain = report;
      plain.retry_after.reset();
      const auto usual = policy.decide(plain, model_attempts_, remaining, has_fallback);
      if (usual.what == retry_decision::action::retry) d.delay = usual.delay;
    }
  }
  ++model_attempts_;
  using act = retry_decision::action;
  if (d.what == act::retry && attempts_started_ > 0) {
    // The upstream that failed is the one a retry would add load to: its budget decides. Over
    // it, this model's attempts are spent (the fallback chain still applies).
    const bool granted = retries_.try_start_retry(current_upstream_);
    auto c = make(kind::retry_asked);
    c.upstream = current_upstream_;
    c.granted = granted;
    out_.push_back(std::move(c));
    if (granted) {
      retry_token_ = current_upstream_;
    } else {
      d = policy.decide(report, settings_.max_retries, remaining, has_fallback);
    }
  }
  switch (d.what) {
    case act::retry:
      phase_ = phase::backing_off;
      if (d.delay.count() <= 0) {
        start_attempt(now);
      } else {
        auto c = make(kind::arm_backoff);
        c.delay = d.delay;
        c.generation = ++backoff_generation_;
        out_.push_back(std::move(c));
      }
      return;
    case act::fallback:
      move_to_model(chain_pos_ + 1);
      start_attempt(now);
      return;
    case act::fail:
    case act::pass_through: {
      auto o = d.result;
      if (o == outcome::upstream_failed) o = history_.exhausted_outcome();
      std::string why = o == outcome::upstream_timeout ? "every upstream attempt timed out"
                        : o == outcome::upstream_rate_limited
                            ? "the upstream is rate limiting (429)"
                        : o == outcome::overloaded ? "gateway overloaded: " + std::string{message}
                        : o == outcome::shutting_down ? std::string{message}
                                                      : "upstream failed: " + std::string{message};
      answer_error(o, std::move(why), d.retry_after);
      return;
    }
  }
}

// The budget refused the attempt because its upstream's token cap can never hold the request:
// no upstream saw it, so it spends neither a retry nor the model's attempts. The chain goes on,
// to another deployment of the model that may hold it, else to the fallbacks; at its end the
// request gets what its upstream attempts earned, or overloaded when it reached none.
void request_lifecycle::after_too_heavy(const attempt_report& report, std::string_view message,
                                        steady_time now) {
  too_heavy_.push_back(current_deployment_);
  const bool elsewhere = choose_deployment(now);
  retry_policy policy{settings_.max_retries, settings_.retry_backoff, jitter_};
  const auto d = policy.decide(report, model_attempts_, deadline_.remaining(now), elsewhere);
  if (d.what == retry_decision::action::fallback) {
    start_attempt(now);
    return;
  }
  if (history_.attempts > 0) {
    const auto o = history_.exhausted_outcome();
    answer_error(o, o == outcome::upstream_timeout        ? "every upstream attempt timed out"
                    : o == outcome::upstream_rate_limited ? "the upstream is rate limiting (429)"
                                                          : "upstream failed: " + last_failure_);
    return;
  }
  answer_error(d.result, "gateway overloaded: " + std::string{message});
}

// The current attempt has said its last word: a next attempt may start while this one's actor
// is still on its way out. A retry it was ends with it.
void request_lifecycle::release_attempt() {
  return_retry_token();
  current_.reset();
}

void request_lifecycle::cancel_attempt(stop_reason reason) {
  ++backoff_generation_;  // a pending backoff is void
  if (!current_) return;
  auto c = make(kind::cancel_attempt);
  c.attempt = *current_;
  c.reason = reason;
  // At the deadline the answer has just been written: many requests expire together, and each
  // one's teardown may wait behind the others' answers. A caller who left waits for nothing but
  // the upstream's close; the drain stops every tree at once, and a stream's teardown queued
  // behind the others could free its slot to a queued caller whose stop is still on its way.
  c.behind_answers = reason == stop_reason::deadline;
  out_.push_back(std::move(c));
  release_attempt();
}

void request_lifecycle::answer_error(outcome o, std::string message,
                                     std::optional<millis> retry_after) {
  auto c = make(kind::send_error);
  c.result = o;
  c.status = status_of(o);
  c.message = std::move(message);
  c.retry_after = retry_after;
  out_.push_back(std::move(c));
  close_caller_side(o, status_of(o));
}

// Mid-stream: cut between whole events, then one error event and the end of the stream.
void request_lifecycle::interrupt_stream(std::string_view type, std::string message) {
  auto c = make(kind::interrupt_stream);
  c.result = outcome::stream_interrupted;
  c.type = type;
  c.message = std::move(message);
  out_.push_back(std::move(c));
  close_caller_side(outcome::stream_interrupted, 200);
}

void request_lifecycle::attempt_over(outcome o, int status) {
  auto c = make(kind::attempt_over);
  c.result = o;
  c.status = status;
  out_.push_back(std::move(c));
}

// The one way into `answered`: from here on, upstream work is late work.
void request_lifecycle::close_caller_side(outcome o, int status) {
  return_retry_token();
  for (auto up : joined_) retries_.request_left(up);
  joined_.clear();
  result_ = o;
  status_ = status;
  phase_ = phase::answered;
  out_.push_back(make(kind::caller_side_over));
}

void request_lifecycle::return_retry_token() {
  if (!retry_token_) return;
  retries_.retry_ended(*retry_token_);
  retry_token_.reset();
}

void request_lifecycle::maybe_finish() {
  if (finished_ || phase_ != phase::answered || attempts_live_ > 0 ||
      connections_started_ != connections_ended_)
    return;
  finished_ = true;
  out_.push_back(make(kind::finish));
}

}  // namespace tether
