// llama-server's own account of its work, read from its `-v --log-timestamps` log (scenario 12):
// per task, when it was deferred (no free slot), launched on a slot, cancelled and stopped, and
// when each of its tokens was decoded. Read incrementally while the engine runs, so the bench
// can wait for the engine to go idle without sending it a request (a poll is traffic to it).
//
// The timestamps are the engine's wall clock (system_clock) in µs since its logger started,
// printed as minutes.seconds.ms.µs; times here are ms on that scale. clock_offset() turns them
// into epoch ms.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tether::bench {

struct engine_task {
  int id = 0;
  // The request's max_tokens (n_decoded + n_remaining of a token line): the bench gives each
  // request a max_tokens that, with its send time, names it (the engine logs no request id).
  std::optional<unsigned> max_tokens;
  std::optional<double> posted_ms;     // "new task" (front = 0): the engine's first sight of it
  std::optional<double> deferred_ms;   // the first "defer task": no slot was free
  std::optional<double> launched_ms;   // "processing task": on a slot from here
  std::optional<double> cancelled_ms;  // "cancel task": the engine noticed its caller left
  std::optional<double> stopped_ms;    // "stop processing": the slot is idle again
  std::vector<double> token_ms;        // each decoded token ("n_decoded = k")
};

class engine_log {
 public:
  explicit engine_log(std::string path);

  // Reads the lines written since the last call.
  void poll();
  // One line (without its newline); exposed for tests.
  void parse_line(std::string_view line);

  const std::map<int, engine_task>& tasks() const { return tasks_; }
  // Every task that was launched has stopped, and every deferred one was launched or cancelled:
  // nothing of the engine's work is pending.
  bool idle() const;

 private:
  engine_task& task(int id);

  std::string path_;
  std::ifstream in_;
  std::string partial_;
  std::map<int, engine_task> tasks_;
};

// The tokens the engine decoded for `task` after `at_ms` (its log time): its `n_decoded = k`
// lines stamped later (a token stamped at `at_ms` was decoded before it).
std::size_t tokens_after(const engine_task& task, double at_ms);

// "M.SS.mmm.uuu" (the log's timestamp) in ms; nullopt when `text` does not start with one.
std::optional<double> engine_log_ms(std::string_view text);

}  // namespace tether::bench
