// A child process for integration tests: its stdout and stderr go to one temp file that the test
// reads (startup lines, access-log lines). Killed (SIGKILL) and reaped on destruction. Its
// environment is PATH, HOME, TMPDIR, the locale and the sanitizers' options from the test's own,
// plus `extra_env`: nothing else the test runner exported reaches it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

namespace tether::test {

using env_list = std::vector<std::pair<std::string, std::string>>;

struct line_match {
  std::size_t line_index = 0;
  std::string line;
  std::vector<std::string> groups;  // groups[0] is the whole match
};

class child_process {
 public:
  // Throws std::runtime_error when the binary cannot be started.
  child_process(std::string binary, std::vector<std::string> args, env_list extra_env = {});
  ~child_process();
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& output_path() const { return output_path_; }

  std::string output() const;
  // Complete lines so far (and a trailing unterminated one, once the process has exited).
  std::vector<std::string> lines() const;

  // The first complete line at index >= from_line that matches; nullopt once the timeout passes
  // or the process has exited without printing one.
  std::optional<line_match> wait_for_line(const std::regex& pattern,
                                          std::chrono::milliseconds timeout,
                                          std::size_t from_line = 0);

  void send_signal(int signal);
  // The exit code (128 + signal when killed by one), or nullopt if still running at the timeout.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);
  bool running();

 private:
  bool reap(bool block);

  std::string binary_;
  std::string output_path_;
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

}  // namespace tether::test
