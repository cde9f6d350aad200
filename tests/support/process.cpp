#include "tests/support/process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>

extern char** environ;

namespace tether::test {
namespace {

// Waiting on an external process has no event to await short of inotify; a short poll is the
// honest tool, and every caller bounds it.
constexpr auto poll_interval = std::chrono::milliseconds(2);

std::string make_output_file() {
  const char* dir = std::getenv("TMPDIR");
  std::string pattern = std::string(dir != nullptr ? dir : "/tmp") + "/tether-test-XXXXXX.log";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  int fd = ::mkstemps(buffer.data(), 4);
  if (fd < 0) throw std::runtime_error("mkstemps: " + std::string(std::strerror(errno)));
  ::close(fd);
  return buffer.data();
}

// The child gets a clean environment: these basics from ours, then the test's own extra_env. A
// variable exported where the suite runs (PROXY_REQUEST_DEADLINE, a key, GLIBC_TUNABLES,
// SSL_CERT_FILE) would otherwise change what every test's gateway does. The sanitizer runtimes'
// options pass, so that a run under ASan/UBSan reports the same way in its children.
bool inherited(const std::string& name) {
  static const std::set<std::string> basics{"PATH",
                                            "HOME",
                                            "TMPDIR",
                                            "LANG",
                                            "LC_ALL",
                                            "LC_CTYPE",
                                            "TZ",
                                            "ASAN_OPTIONS",
                                            "UBSAN_OPTIONS",
                                            "LSAN_OPTIONS",
                                            "ASAN_SYMBOLIZER_PATH",
                                            "LLVM_SYMBOLIZER_PATH"};
  return basics.count(name) != 0;
}

std::vector<std::string> split_lines(const std::string& text, bool keep_partial) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (true) {
    auto end = text.find('\n', start);
    if (end == std::string::npos) break;
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  if (keep_partial && start < text.size()) lines.push_back(text.substr(start));
  return lines;
}

}  // namespace

child_process::child_process(std::string binary, std::vector<std::string> args, env_list extra_env)
    : binary_(std::move(binary)), output_path_(make_output_file()) {
  std::vector<std::string> argv_storage;
  argv_storage.push_back(binary_);
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());

  std::set<std::string> overridden;
  for (const auto& [name, value] : extra_env) overridden.insert(name);
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    const auto name = entry.substr(0, entry.find('='));
    if (inherited(name) && overridden.count(name) == 0) env_storage.push_back(entry);
  }
  for (const auto& [name, value] : extra_env) env_storage.push_back(name + "=" + value);

  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, output_path_.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  // Nothing else of the test's: its sockets (Asio's are not close-on-exec) would stay open in a
  // child started while they are, and a peer would then never see them close.
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  int rc = ::posix_spawnp(&pid_, binary_.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    ::unlink(output_path_.c_str());
    throw std::runtime_error("cannot start " + binary_ + ": " + std::strerror(rc));
  }
}

child_process::~child_process() {
  if (!exit_code_) {
    ::kill(pid_, SIGKILL);
    reap(true);
  }
  // A failing test is much easier to read with what the process said.
  if (::testing::Test::HasFailure()) {
    auto all = lines();
    std::size_t first = all.size() > 40 ? all.size() - 40 : 0;
    std::cerr << "---- last output of " << binary_ << " (pid " << pid_ << ") ----\n";
    for (std::size_t i = first; i < all.size(); ++i) std::cerr << all[i] << "\n";
    std::cerr << "----\n";
  }
  ::unlink(output_path_.c_str());
}

std::string child_process::output() const {
  std::ifstream in(output_path_, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> child_process::lines() const {
  return split_lines(output(), exit_code_.has_value());
}

std::optional<line_match> child_process::wait_for_line(const std::regex& pattern,
                                                       std::chrono::milliseconds timeout,
                                                       std::size_t from_line) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    // Read the exit state before the file, so a line printed just before exiting is seen.
    bool exited = !running();
    auto all = split_lines(output(), false);
    for (std::size_t i = from_line; i < all.size(); ++i) {
      std::smatch m;
      if (std::regex_search(all[i], m, pattern)) {
        line_match result{i, all[i], {}};
        for (const auto& group : m) result.groups.push_back(group.str());
        return result;
      }
    }
    if (exited || std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(poll_interval);
  }
}

void child_process::send_signal(int signal) {
  if (!exit_code_) ::kill(pid_, signal);
}

bool child_process::running() {
  return !reap(false);
}

bool child_process::reap(bool block) {
  if (exit_code_) return true;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r != pid_) return false;
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return true;
}

std::optional<int> child_process::wait_exit(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!reap(false)) {
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(poll_interval);
  }
  return exit_code_;
}

}  // namespace tether::test
