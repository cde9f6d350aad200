#include "tests/support/llama_engine.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>

#include "tests/support/http_client.hpp"
#include "tests/support/leaving_client.hpp"
#include "tests/support/taken_port.hpp"

namespace tether::test {
namespace {

double epoch_now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::optional<int> int_after(std::string_view line, std::string_view marker) {
  const auto at = line.find(marker);
  if (at == std::string_view::npos) return std::nullopt;
  auto rest = line.substr(at + marker.size());
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  int value = 0;
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), value);
  if (ec != std::errc{}) return std::nullopt;
  return value;
}

// "M.SS.mmm.uuu " (common/log.cpp: minutes, seconds, ms, µs since the log started) at the start
// of the line; the length of the prefix consumed in `used`.
std::optional<double> timestamp_ms(std::string_view line, std::size_t& used) {
  long parts[4] = {0, 0, 0, 0};
  std::size_t pos = 0;
  for (int i = 0; i < 4; ++i) {
    auto [end, ec] = std::from_chars(line.data() + pos, line.data() + line.size(), parts[i]);
    if (ec != std::errc{}) return std::nullopt;
    pos = static_cast<std::size_t>(end - line.data());
    const char want = i < 3 ? '.' : ' ';
    if (pos >= line.size() || line[pos] != want) return std::nullopt;
    ++pos;
  }
  used = pos;
  return static_cast<double>(parts[0]) * 60000.0 + static_cast<double>(parts[1]) * 1000.0 +
         static_cast<double>(parts[2]) + static_cast<double>(parts[3]) / 1000.0;
}

// "slot <func>: id  0 | task 5 | <message>": the slot and task of a slot's line.
bool slot_fields(std::string_view line, engine_event& e) {
  if (line.find("slot ") == std::string_view::npos) return false;
  auto slot = int_after(line, ": id ");
  auto task = int_after(line, "| task ");
  if (!slot || !task) return false;
  e.slot = *slot;
  e.task = *task;
  return true;
}

}  // namespace

std::optional<engine_paths> engine_paths_from_env(std::string& why) {
  const char* server = std::getenv("TETHER_LLAMA_SERVER");
  const char* model = std::getenv("TETHER_ENGINE_MODEL");
  if (server == nullptr || *server == '\0' || model == nullptr || *model == '\0') {
    why =
        "TETHER_LLAMA_SERVER and TETHER_ENGINE_MODEL are not both set (scripts/engine.sh builds "
        "llama-server and makes the model, and prints them; scripts/test.sh sets them)";
    return std::nullopt;
  }
  if (!is_file(server) || !is_file(model)) {
    why = std::string("TETHER_LLAMA_SERVER (") + server + ") or TETHER_ENGINE_MODEL (" + model +
          ") names no file";
    return std::nullopt;
  }
  return engine_paths{server, model};
}

bool engine_required() {
  const char* required = std::getenv("TETHER_REQUIRE_ENGINE");
  return required != nullptr && std::string_view(required) == "1";
}

std::optional<engine_event> parse_engine_log_line(std::string_view line) {
  // A line can begin with the colour reset that ended the line before it (the chat template's
  // debug output is coloured whatever --log-colors says).
  while (line.size() > 1 && line[0] == '\x1b' && line[1] == '[') {
    const auto end = line.find('m');
    if (end == std::string_view::npos) return std::nullopt;
    line.remove_prefix(end + 1);
  }
  std::size_t used = 0;
  auto at = timestamp_ms(line, used);
  if (!at) return std::nullopt;
  line.remove_prefix(used);
  engine_event e;
  e.at_ms = *at;
  if (line.find("next token:") != std::string_view::npos) {
    auto decoded = int_after(line, "n_decoded = ");
    if (!slot_fields(line, e) || !decoded) return std::nullopt;
    e.kind = engine_event_kind::token;
    e.n_decoded = *decoded;
    return e;
  }
  if (line.find("processing task, is_child") != std::string_view::npos) {
    if (!slot_fields(line, e)) return std::nullopt;
    e.kind = engine_event_kind::launched;
    return e;
  }
  if (line.find("new prompt, ") != std::string_view::npos) {
    auto n = int_after(line, "task.n_tokens = ");
    if (!slot_fields(line, e) || !n) return std::nullopt;
    e.kind = engine_event_kind::prompt;
    e.n_prompt = *n;
    return e;
  }
  if (line.find("stop processing:") != std::string_view::npos) {
    if (!slot_fields(line, e)) return std::nullopt;
    e.kind = engine_event_kind::released;
    return e;
  }
  if (line.find("cancel task, id_task = ") != std::string_view::npos) {
    e.kind = engine_event_kind::cancel;
    e.task = int_after(line, "cancel task, id_task = ").value_or(-1);
    return e.task >= 0 ? std::optional(e) : std::nullopt;
  }
  if (line.find("defer task, id") != std::string_view::npos) {
    // The server's "no slot is available, defer task, id_task = N" and its queue's "defer task,
    // id = N" both name it.
    auto task = int_after(line, "defer task, id_task = ");
    if (!task) task = int_after(line, "defer task, id = ");
    if (!task) return std::nullopt;
    e.kind = engine_event_kind::deferred;
    e.task = *task;
    return e;
  }
  if (auto done = line.find("done request: "); done != std::string_view::npos) {
    // "done request: GET /slots 127.0.0.1 200": method and path.
    auto rest = line.substr(done + 14);
    const auto method_end = rest.find(' ');
    if (method_end == std::string_view::npos) return std::nullopt;
    const auto path_end = rest.find(' ', method_end + 1);
    e.kind = engine_event_kind::request;
    e.path = std::string(rest.substr(0, path_end));
    return e;
  }
  return std::nullopt;
}

std::vector<engine_event> parse_engine_log(const std::vector<std::string>& lines) {
  std::vector<engine_event> out;
  for (const auto& line : lines) {
    if (auto e = parse_engine_log_line(line)) out.push_back(std::move(*e));
  }
  return out;
}

std::map<int, engine_task> engine_tasks(const std::vector<engine_event>& events) {
  std::map<int, engine_task> tasks;
  for (const auto& e : events) {
    if (e.kind == engine_event_kind::request) continue;
    auto& t = tasks[e.task];
    t.task = e.task;
    switch (e.kind) {
      case engine_event_kind::launched:
        t.slot = e.slot;
        if (!t.launched_ms) t.launched_ms = e.at_ms;
        break;
      case engine_event_kind::prompt:
        t.n_prompt = e.n_prompt;
        break;
      case engine_event_kind::token:
        t.token_ms.push_back(e.at_ms);
        break;
      case engine_event_kind::cancel:
        if (!t.cancel_ms) t.cancel_ms = e.at_ms;
        break;
      case engine_event_kind::released:
        if (!t.released_ms) t.released_ms = e.at_ms;
        break;
      case engine_event_kind::deferred:
        if (!t.deferred_ms) t.deferred_ms = e.at_ms;
        break;
      case engine_event_kind::request:
        break;
    }
  }
  return tasks;
}

std::optional<double> decode_step_ms(const std::vector<engine_event>& events) {
  std::vector<double> gaps;
  for (const auto& [id, t] : engine_tasks(events)) {
    for (std::size_t i = 1; i < t.token_ms.size(); ++i)
      gaps.push_back(t.token_ms[i] - t.token_ms[i - 1]);
  }
  if (gaps.empty()) return std::nullopt;
  auto mid = gaps.begin() + static_cast<std::ptrdiff_t>(gaps.size() / 2);
  std::nth_element(gaps.begin(), mid, gaps.end());
  return *mid;
}

int tasks_held_at(const std::map<int, engine_task>& tasks, double at_ms) {
  int held = 0;
  for (const auto& [id, t] : tasks) {
    if (t.launched_ms) {
      if (*t.launched_ms <= at_ms && (!t.released_ms || at_ms < *t.released_ms)) ++held;
      // Waiting for a slot before it got one.
      else if (t.deferred_ms && *t.deferred_ms <= at_ms && at_ms < *t.launched_ms)
        ++held;
    } else if (t.deferred_ms && *t.deferred_ms <= at_ms && (!t.cancel_ms || at_ms < *t.cancel_ms)) {
      // Deferred and never launched: held until its cancel took it out of the queue.
      ++held;
    }
  }
  return held;
}

// ---- the process --------------------------------------------------------------------------

llama_engine::llama_engine(const engine_paths& paths, llama_engine_options options) {
  // A port taken and released can be taken by someone else before the engine binds it: a
  // second try on another port covers that race.
  for (int attempt = 0; attempt < 3; ++attempt) {
    port_ = free_port();
    process_ = std::make_unique<child_process>(
        paths.server, std::vector<std::string>{"-m",
                                               paths.model,
                                               "--host",
                                               "127.0.0.1",
                                               "--port",
                                               std::to_string(port_),
                                               "-t",
                                               "1",
                                               "-tb",
                                               "1",
                                               "-np",
                                               std::to_string(options.slots),
                                               "-c",
                                               std::to_string(options.context),
                                               "--no-kv-unified",
                                               "--slots",
                                               "--metrics",
                                               "-v",
                                               "--log-timestamps",
                                               "--log-colors",
                                               "off"});
    // Loading the model and warming up take a few seconds; a loaded machine takes longer.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    bool up = false;
    while (std::chrono::steady_clock::now() < until && process_->running()) {
      try {
        if (request("GET", port_, "/health", {}, {}, std::chrono::seconds(2)).status == 200) {
          up = true;
          break;
        }
      } catch (const http_error&) {
        // Not listening yet.
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (up) {
      tie_clocks();
      return;
    }
    const bool exited = !process_->running();
    if (!exited) {
      throw std::runtime_error("llama-server did not answer /health within 60 s; its log: " +
                               process_->output_path());
    }
  }
  throw std::runtime_error("llama-server exited before it answered /health (3 tries)");
}

llama_engine::~llama_engine() = default;

// The log's timestamps count from the engine's own start; the tests' moments are this process's
// clock. A request the engine logs ("done request: GET /slots") lies between our sending it and
// our reading its answer: the probe with the shortest round trip ties the clocks best.
void llama_engine::tie_clocks() {
  struct probe {
    double sent;
    double received;
  };
  std::vector<probe> probes;
  for (int i = 0; i < 8; ++i) {
    const double sent = epoch_now_ms();
    auto r = request("GET", port_, "/slots", {}, {}, std::chrono::seconds(5));
    const double received = epoch_now_ms();
    if (r.status != 200)
      throw std::runtime_error("llama-server: GET /slots " + std::to_string(r.status));
    probes.push_back({sent, received});
  }
  std::vector<engine_event> logged;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (true) {
    logged.clear();
    for (auto& e : events())
      if (e.kind == engine_event_kind::request && e.path == "GET /slots") logged.push_back(e);
    if (logged.size() >= probes.size() || std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (logged.size() != probes.size()) {
    throw std::runtime_error("llama-server logged " + std::to_string(logged.size()) + " of " +
                             std::to_string(probes.size()) + " GET /slots (is -v on?)");
  }
  std::size_t best = 0;
  for (std::size_t i = 1; i < probes.size(); ++i) {
    if (probes[i].received - probes[i].sent < probes[best].received - probes[best].sent) best = i;
  }
  const double mid = (probes[best].sent + probes[best].received) / 2;
  offset_ms_ = mid - logged[best].at_ms;
  clock_error_ms_ = probes[best].received - probes[best].sent;
}

std::vector<engine_event> llama_engine::events() const {
  return events_from(0);
}

std::vector<engine_event> llama_engine::events_from(std::size_t from) const {
  std::lock_guard lock(read_mutex_);
  std::ifstream in(process_->output_path(), std::ios::binary);
  in.seekg(static_cast<std::streamoff>(read_offset_));
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // a line the engine has not finished writing: read it next time
    read_offset_ += line.size() + 1;
    if (auto e = parse_engine_log_line(line)) parsed_.push_back(std::move(*e));
  }
  if (from >= parsed_.size()) return {};
  return {parsed_.begin() + static_cast<std::ptrdiff_t>(from), parsed_.end()};
}

std::optional<engine_event> llama_engine::wait_for(
    const std::function<bool(const engine_event&)>& pred, std::chrono::milliseconds timeout,
    std::size_t from) const {
  const auto until = std::chrono::steady_clock::now() + timeout;
  std::size_t seen = from;
  while (true) {
    const auto fresh = events_from(seen);
    for (const auto& e : fresh)
      if (pred(e)) return e;
    seen += fresh.size();
    if (std::chrono::steady_clock::now() >= until) return std::nullopt;
    // The log is a file another process writes: no event to await but its growth. Not tighter:
    // the reading shares the two cores with the engine whose steps the tests measure.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::vector<int> prompt_tokens_of(const llama_engine& engine, int callers,
                                  const std::function<std::string(int caller)>& body) {
  std::vector<int> out;
  for (int c = 0; c < callers; ++c) {
    auto r = request("POST", engine.port(), "/v1/chat/completions", body(c), {},
                     std::chrono::seconds(30));
    EXPECT_EQ(r.status, 200) << r.body;
    if (r.status != 200) return {};
    out.push_back(static_cast<int>(r.json().at("usage").at("prompt_tokens").to_number<double>()));
  }
  return out;
}

leaving_callers_result run_leaving_callers(const llama_engine& engine, std::uint16_t port,
                                           const leaving_callers& plan) {
  using namespace std::chrono_literals;
  std::atomic<int> left{0};
  std::atomic<int> answered{0};
  std::mutex notes_mutex;
  leaving_callers_result out;
  auto note = [&](int c, int r, const std::string& what) {
    std::lock_guard lock(notes_mutex);
    ++out.off_plan;
    out.notes += "\n  caller " + std::to_string(c) + " round " + std::to_string(r) + ": " + what;
  };
  std::vector<std::thread> threads;
  for (int c = 0; c < plan.callers; ++c) {
    threads.emplace_back([&, c] {
      for (int r = 0; r < plan.rounds; ++r) {
        const bool stream = (c + r) % 2 == 0;
        try {
          const auto from = engine.events().size();
          leaving_client caller(port, "/v1/chat/completions", plan.body(c, stream));
          if (!plan.leaves(c, r)) {
            if (caller.wait_end(60s) && caller.status() == 200 && caller.complete()) {
              ++answered;
            } else {
              note(c, r, "status " + std::to_string(caller.status()) + " " + caller.body());
            }
            continue;
          }
          auto prompt = engine.wait_for(
              [&](const engine_event& e) {
                return e.kind == engine_event_kind::prompt && e.n_prompt == plan.prompt_tokens[c];
              },
              60s, from);
          const bool mid = prompt && engine
                                         .wait_for(
                                             [&](const engine_event& e) {
                                               return e.kind == engine_event_kind::token &&
                                                      e.task == prompt->task &&
                                                      e.n_decoded >= plan.leave_after_tokens;
                                             },
                                             30s, from)
                                         .has_value();
          if (mid && !caller.complete()) {
            caller.leave();
            ++left;
          } else {
            note(c, r,
                 "not left mid-generation (task seen: " + std::string(prompt ? "yes" : "no") +
                     ", status " + std::to_string(caller.status()) + " " + caller.body() + ")");
          }
        } catch (const http_error& e) {
          note(c, r, e.what());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  out.left = left.load();
  out.answered = answered.load();
  return out;
}

}  // namespace tether::test
