// llama.cpp's llama-server as a child process of an engine test, and a reader of the engine's
// own account of its work: its `-v --log-timestamps` log (when a task got a slot, each token it
// decoded, the cancel, the slot's release, a task deferred for want of a slot). The tests judge
// from that log, not from tether's: it is what the engine did, whatever tether believes.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/process.hpp"

namespace tether::test {

// The engine and its model, from TETHER_LLAMA_SERVER and TETHER_ENGINE_MODEL (scripts/engine.sh
// makes both and prints them). nullopt, with the reason in `why`, when either is unset or names
// no file.
struct engine_paths {
  std::string server;
  std::string model;
};
std::optional<engine_paths> engine_paths_from_env(std::string& why);
// TETHER_REQUIRE_ENGINE=1 (CI sets it): a test without an engine fails instead of skipping.
bool engine_required();

// ---- the engine's log ---------------------------------------------------------------------

enum class engine_event_kind {
  launched,  // a slot took the task ("processing task")
  prompt,    // the slot starts on the task's prompt ("new prompt, ... task.n_tokens = N")
  token,     // the slot decoded one more token of the task ("next token")
  cancel,    // the HTTP side asked for the task to be cancelled: it saw its caller gone
  released,  // the slot let the task go ("stop processing"): the work ended
  deferred,  // no slot was free: the task waits inside the engine ("defer task")
  request,   // an HTTP request was answered ("done request: GET /slots ... 200")
};

struct engine_event {
  engine_event_kind kind = engine_event_kind::launched;
  double at_ms = 0;   // the line's timestamp: ms since the engine's log started
  int task = -1;      // every kind but request
  int slot = -1;      // launched, token, released
  int n_decoded = 0;  // token: the task's tokens decoded so far, this one included
  int n_prompt = 0;   // prompt: the prompt's tokens
  std::string path;   // request: method and path, e.g. "GET /slots"
};

// One line of the log; nullopt for every other line (and for lines without a timestamp).
std::optional<engine_event> parse_engine_log_line(std::string_view line);
std::vector<engine_event> parse_engine_log(const std::vector<std::string>& lines);

// What one task did, from the events: when it got a slot, its tokens, its cancel and release.
struct engine_task {
  int task = -1;
  int slot = -1;
  int n_prompt = 0;
  std::optional<double> deferred_ms;  // the first time it was deferred
  std::optional<double> launched_ms;
  std::vector<double> token_ms;  // one per decoded token
  std::optional<double> cancel_ms;
  std::optional<double> released_ms;
};
std::map<int, engine_task> engine_tasks(const std::vector<engine_event>& events);

// The engine's decode step: the median gap between consecutive tokens of one task, over every
// task with at least two tokens (a step with two busy slots is longer than with one; the median
// is the step as the engine ran it). nullopt with no such gap.
std::optional<double> decode_step_ms(const std::vector<engine_event>& events);

// The tasks the engine holds at `at_ms` (its log time): launched and not yet released, plus
// deferred and not yet launched.
int tasks_held_at(const std::map<int, engine_task>& tasks, double at_ms);

// ---- the engine process -------------------------------------------------------------------

struct llama_engine_options {
  int slots = 2;       // -np: requests decoded at once; more wait inside the engine
  int context = 4096;  // -c, split between the slots (--no-kv-unified)
};

class llama_engine {
 public:
  // Starts llama-server on a free loopback port with one thread (-t 1 -tb 1), --slots, --metrics
  // and `-v --log-timestamps` (its log is the child's output), waits (bounded) until /health
  // answers 200, and ties its log's clock to this process's (see to_epoch_ms). Throws when it
  // does not come up.
  explicit llama_engine(const engine_paths& paths, llama_engine_options options = {});
  ~llama_engine();  // SIGKILL, reaped
  llama_engine(const llama_engine&) = delete;
  llama_engine& operator=(const llama_engine&) = delete;

  std::uint16_t port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  child_process& process() { return *process_; }

  // The log so far, parsed (read on from where the last call stopped: the log grows by a line
  // per token, and the tests read it while the engine decodes).
  std::vector<engine_event> events() const;
  // Those from index `from` on (the tests' waits read only what is new).
  std::vector<engine_event> events_from(std::size_t from) const;
  // A log time as epoch ms (system clock, as harness.hpp's epoch_ms), and back.
  double to_epoch_ms(double log_ms) const { return log_ms + offset_ms_; }
  double to_log_ms(double epoch) const { return epoch - offset_ms_; }
  // How far the tie between the clocks may be off, in ms (the round trip of its best probe).
  double clock_error_ms() const { return clock_error_ms_; }

  // Waits (bounded) until the log shows an event at index `from` or later that `pred` accepts;
  // returns the first.
  std::optional<engine_event> wait_for(const std::function<bool(const engine_event&)>& pred,
                                       std::chrono::milliseconds timeout,
                                       std::size_t from = 0) const;

 private:
  void tie_clocks();

  std::unique_ptr<child_process> process_;
  std::uint16_t port_ = 0;
  double offset_ms_ = 0;
  double clock_error_ms_ = 0;
  mutable std::mutex read_mutex_;
  mutable std::size_t read_offset_ = 0;  // bytes of the log parsed so far (whole lines)
  mutable std::vector<engine_event> parsed_;
};

// ---- callers who leave mid-generation ------------------------------------------------------

// Each caller's prompt length in the engine's tokens, asked of the engine itself (its usage):
// `body(c)` is caller c's request, with max_tokens 1. Empty, with a test failure recorded, when
// the engine does not answer one.
std::vector<int> prompt_tokens_of(const llama_engine& engine, int callers,
                                  const std::function<std::string(int caller)>& body);

// Callers on threads of their own, through a gateway on `port`, each sending `rounds` requests in
// turn. Caller c's request of round r streams when c + r is even (`body(c, stream)`); it is read
// whole, or, when `leaves(c, r)`, left once the engine has decoded `leave_after_tokens` of its
// task (the first task after it was sent to start on a prompt of `prompt_tokens[c]` tokens: each
// caller needs a length of its own).
struct leaving_callers {
  int callers = 0;
  int rounds = 0;
  int leave_after_tokens = 5;
  std::vector<int> prompt_tokens;
  std::function<std::string(int caller, bool stream)> body;
  std::function<bool(int caller, int round)> leaves;
};
struct leaving_callers_result {
  int left = 0;      // left mid-generation, as planned
  int answered = 0;  // read whole with status 200, as planned
  int off_plan = 0;  // neither: what each saw is in `notes`
  std::string notes;
};
leaving_callers_result run_leaving_callers(const llama_engine& engine, std::uint16_t port,
                                           const leaving_callers& plan);

}  // namespace tether::test
