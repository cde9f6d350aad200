#include "bench/bench/engine_log.hpp"

#include <algorithm>
#include <charconv>

namespace tether::bench {
namespace {

// The integer right after `key` in `line`, if both are there.
template <typename T>
std::optional<T> number_after(std::string_view line, std::string_view key) {
  const auto at = line.find(key);
  if (at == std::string_view::npos) return std::nullopt;
  auto rest = line.substr(at + key.size());
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  T value{};
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), value);
  if (ec != std::errc{}) return std::nullopt;
  return value;
}

void keep_first(std::optional<double>& slot, double ms) {
  if (!slot) slot = ms;
}

}  // namespace

std::optional<double> engine_log_ms(std::string_view text) {
  // minutes (any width) . seconds (2) . ms (3) . µs (3), then a space.
  long parts[4] = {0, 0, 0, 0};
  const char* p = text.data();
  const char* end = text.data() + text.size();
  for (int i = 0; i < 4; ++i) {
    auto [next, ec] = std::from_chars(p, end, parts[i]);
    if (ec != std::errc{} || next == p) return std::nullopt;
    p = next;
    const char want = i < 3 ? '.' : ' ';
    if (p == end || *p != want) return std::nullopt;
    ++p;
  }
  return static_cast<double>(parts[0]) * 60000.0 + static_cast<double>(parts[1]) * 1000.0 +
         static_cast<double>(parts[2]) + static_cast<double>(parts[3]) / 1000.0;
}

std::size_t tokens_after(const engine_task& task, double at_ms) {
  return static_cast<std::size_t>(std::count_if(task.token_ms.begin(), task.token_ms.end(),
                                                [&](double ms) { return ms > at_ms; }));
}

engine_log::engine_log(std::string path) : path_(std::move(path)) {}

engine_task& engine_log::task(int id) {
  auto& t = tasks_[id];
  t.id = id;
  return t;
}

void engine_log::poll() {
  if (!in_.is_open()) {
    in_.open(path_, std::ios::binary);
    if (!in_.is_open()) return;
  }
  in_.clear();  // past the end last time: more may have been written since
  char buf[65536];
  while (in_.read(buf, sizeof buf) || in_.gcount() > 0) {
    partial_.append(buf, static_cast<std::size_t>(in_.gcount()));
    std::size_t start = 0;
    for (auto nl = partial_.find('\n'); nl != std::string::npos; nl = partial_.find('\n', start)) {
      parse_line(std::string_view(partial_).substr(start, nl - start));
      start = nl + 1;
    }
    partial_.erase(0, start);
  }
}

void engine_log::parse_line(std::string_view line) {
  // A line without a timestamp continues the previous one (a token's text with a newline).
  const auto ms = engine_log_ms(line);
  if (!ms) return;
  if (line.find("| n_decoded = ") != std::string_view::npos) {
    auto id = number_after<int>(line, "| task ");
    if (!id) return;
    auto& t = task(*id);
    t.token_ms.push_back(*ms);
    if (!t.max_tokens) {
      auto decoded = number_after<unsigned>(line, "| n_decoded = ");
      auto remaining = number_after<unsigned>(line, "n_remaining = ");
      if (decoded && remaining) t.max_tokens = *decoded + *remaining;
    }
    return;
  }
  if (line.find("new task, id = ") != std::string_view::npos) {
    // Cancels are posted to the front; only the requests' own tasks (front = 0) are work.
    if (line.find("front = 0") == std::string_view::npos) return;
    if (auto id = number_after<int>(line, "new task, id = ")) keep_first(task(*id).posted_ms, *ms);
    return;
  }
  if (line.find("defer task") != std::string_view::npos) {
    auto id = number_after<int>(line, "defer task, id = ");
    if (!id) id = number_after<int>(line, "defer task, id_task = ");
    if (id) keep_first(task(*id).deferred_ms, *ms);
    return;
  }
  if (line.find("cancel task, id_task = ") != std::string_view::npos) {
    if (auto id = number_after<int>(line, "cancel task, id_task = ")) {
      keep_first(task(*id).cancelled_ms, *ms);
    }
    return;
  }
  if (line.find("stop processing") != std::string_view::npos) {
    if (auto id = number_after<int>(line, "| task ")) task(*id).stopped_ms = *ms;
    return;
  }
  if (line.find("| processing task") != std::string_view::npos) {
    if (auto id = number_after<int>(line, "| task ")) keep_first(task(*id).launched_ms, *ms);
  }
}

bool engine_log::idle() const {
  for (const auto& [id, t] : tasks_) {
    if (t.launched_ms && !t.stopped_ms) return false;
    if (t.deferred_ms && !t.launched_ms && !t.cancelled_ms) return false;
  }
  return true;
}

}  // namespace tether::bench
