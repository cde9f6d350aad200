// tether in front of a real engine, llama.cpp's llama-server (contract, "The work ends in the
// engine"), judged from the engine's own log: when the caller leaves, the deadline passes or the
// drain cuts, the engine's work for the request ends (its slot's "stop processing") within two
// of its decode steps plus 50 ms — streamed or not, with other traffic on the engine or without;
// the engine never holds more of tether's requests than the upstream's max_in_flight; and the
// connection llama-server closes after every streamed answer costs no caller a 502.
//
// Each case prints what it measured ("[engine] ..."): the time from the cut to the end of the
// engine's work, the tokens the engine decoded after the cut, its decode step.
#include <gtest/gtest.h>

#include <sstream>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <map>
#include <set>

#include "tests/integration/harness.hpp"
#include "tests/support/leaving_client.hpp"
#include "tests/support/llama_engine.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

// The contract's bound: the work ends within this many of the engine's decode steps, plus this.
constexpr double steps_allowed = 2;
constexpr double slack_ms = 50;
// Long enough that a request abandoned mid-way is still decoding at every cut below, short
// enough that one left to run to its end (the defect) ends within the case's time limit.
constexpr int long_tokens = 400;
// How long a case waits for the engine to end an abandoned request: past the whole generation
// of long_tokens on a loaded machine, so a task that runs to its end is still seen ending.
constexpr auto work_end_wait = 60s;

std::string chat_request(bool stream, int max_tokens) {
  return R"({"model":"tiny","stream":)" + std::string(stream ? "true" : "false") +
         R"(,"max_tokens":)" + std::to_string(max_tokens) +
         R"(,"messages":[{"role":"user","content":"Tell me a long story about the sea."}]})";
}

// One upstream "llama" (llama-server, engine = "llamacpp") serving chat and completions, one
// model "tiny" on it.
std::string engine_config(const llama_engine& engine, const std::string& request_keys,
                          int max_in_flight = 64, const std::string& server_keys = "",
                          const std::string& upstream_keys = "") {
  return "[server]\nlisten = \"127.0.0.1:0\"\n" + server_keys + "\n\n[request]\n" + request_keys +
         "\n\n[[upstreams]]\nname = \"llama\"\nbase_url = \"" + engine.url() +
         "\"\nengine = \"llamacpp\"\nsurfaces = [\"chat\", \"completions\"]\n" + upstream_keys +
         "\nmax_in_flight = " + std::to_string(max_in_flight) +
         "\n\n[[models]]\nname = \"tiny\"\nupstream = \"llama\"\nupstream_model = \"tiny\"\n"
         "\n[telemetry]\nlog_format = \"json\"\n";
}

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    auto paths = engine_paths_from_env(why);
    if (!paths) {
      if (engine_required()) FAIL() << "TETHER_REQUIRE_ENGINE=1, but " << why;
      GTEST_SKIP() << "no engine: " << why;
    }
    paths_ = *paths;
    engine_ = std::make_unique<llama_engine>(paths_);
  }

  llama_engine& engine() { return *engine_; }
  // max_in_flight = 2 in front of a 2-slot engine, with callers leaving mid-generation (below).
  void concurrency_with_aborts(const std::string& upstream_keys);

  // The first task the engine launched at or after event `from` (an index into its events)
  // whose id is not in `except`; bounded.
  std::optional<int> launched_task(std::size_t from, const std::set<int>& except = {}) {
    auto e = engine().wait_for(
        [&](const engine_event& ev) {
          return ev.kind == engine_event_kind::launched && except.count(ev.task) == 0;
        },
        20s, from);
    if (!e) return std::nullopt;
    return e->task;
  }

  // Waits until the engine has decoded `n` tokens of `task`: the request is mid-generation.
  bool decoded(int task, int n) {
    return engine()
        .wait_for(
            [&](const engine_event& e) {
              return e.kind == engine_event_kind::token && e.task == task && e.n_decoded >= n;
            },
            20s)
        .has_value();
  }

  // The case's verdict: the task, running at `cut` (epoch ms), ended in the engine within the
  // bound. Prints the figures either way.
  void expect_work_ended(const std::string& what, int task, double cut) {
    auto end = engine().wait_for(
        [&](const engine_event& e) {
          return e.kind == engine_event_kind::released && e.task == task;
        },
        work_end_wait);
    const auto events = engine().events();
    const auto tasks = engine_tasks(events);
    ASSERT_TRUE(end) << what << ": the engine never released task " << task;
    const auto& t = tasks.at(task);
    const double cut_log = engine().to_log_ms(cut);
    ASSERT_TRUE(t.launched_ms && *t.launched_ms < cut_log)
        << what << ": task " << task << " was not running at the cut";
    const auto tokens_before = std::count_if(t.token_ms.begin(), t.token_ms.end(),
                                             [&](double at) { return at <= cut_log; });
    const auto tokens_after = static_cast<long>(t.token_ms.size()) - tokens_before;
    const double ended_after = *t.released_ms - cut_log;
    const auto step = decode_step_ms(events);
    ASSERT_TRUE(step) << what << ": no decode step in the engine's log";
    const double bound = steps_allowed * *step + slack_ms;
    std::printf(
        "[engine] %s: task %d ended %.1f ms after the cut (%ld tokens after it, %ld before; "
        "cancel %s); decode step %.1f ms; bound %.1f ms; clocks tied within %.2f ms\n",
        what.c_str(), task, ended_after, tokens_after, static_cast<long>(tokens_before),
        t.cancel_ms ? (std::to_string(*t.cancel_ms - cut_log) + " ms after the cut").c_str()
                    : "none",
        *step, bound, engine().clock_error_ms());
    EXPECT_GT(ended_after, 0.0) << what << ": the task ended before the cut: nothing was tested";
    EXPECT_LE(ended_after, bound) << what << ": the engine's work went on " << ended_after
                                  << " ms (" << tokens_after << " tokens) after the cut; allowed "
                                  << bound << " ms (2 decode steps of " << *step << " ms + 50 ms)";
  }

  engine_paths paths_;
  std::unique_ptr<llama_engine> engine_;
};

// ---- the caller leaves ------------------------------------------------------------------

TEST_F(EngineTest, StreamCallerLeavesTheEngineStops) {
  gateway_process gw{engine_config(engine(), "deadline_ms = 60000\nmax_retries = 0")};
  const auto from = engine().events().size();
  leaving_client caller(gw.port(), "/v1/chat/completions", chat_request(true, long_tokens),
                        {{"x-request-id", "stream-leaves"}});
  ASSERT_TRUE(caller.wait_events(20, 20s)) << "the stream never got going";
  const auto task = launched_task(from);
  ASSERT_TRUE(task);
  const double cut = epoch_ms(caller.leave());
  expect_work_ended("stream, caller leaves", *task, cut);
  auto line = access_line(gw, "stream-leaves");
  ASSERT_TRUE(line);
  EXPECT_EQ(str(line->at("outcome")), "client_disconnected");
}

TEST_F(EngineTest, NonStreamCallerLeavesTheEngineStops) {
  gateway_process gw{engine_config(engine(), "deadline_ms = 60000\nmax_retries = 0")};
  const auto from = engine().events().size();
  leaving_client caller(gw.port(), "/v1/chat/completions", chat_request(false, long_tokens),
                        {{"x-request-id", "whole-leaves"}});
  const auto task = launched_task(from);
  ASSERT_TRUE(task);
  ASSERT_TRUE(decoded(*task, 20)) << "the engine never got going";
  const double cut = epoch_ms(caller.leave());
  expect_work_ended("non-stream, caller leaves, engine otherwise idle", *task, cut);
  auto line = access_line(gw, "whole-leaves");
  ASSERT_TRUE(line);
  EXPECT_EQ(str(line->at("outcome")), "client_disconnected");
}

// llama-server notices a non-streaming request's caller gone only when no result for any
// request was produced for a second: another client's stream keeps it from ever noticing.
TEST_F(EngineTest, NonStreamCallerLeavesWhileAnotherClientStreamsTheEngineStops) {
  gateway_process gw{engine_config(engine(), "deadline_ms = 60000\nmax_retries = 0")};
  auto from = engine().events().size();
  leaving_client other(engine().port(), "/v1/chat/completions", chat_request(true, 4000));
  ASSERT_TRUE(other.wait_events(5, 20s)) << "the other client's stream never got going";
  const auto other_task = launched_task(from);
  ASSERT_TRUE(other_task);

  from = engine().events().size();
  leaving_client caller(gw.port(), "/v1/chat/completions", chat_request(false, long_tokens),
                        {{"x-request-id", "whole-leaves-busy"}});
  const auto task = launched_task(from, {*other_task});
  ASSERT_TRUE(task);
  ASSERT_TRUE(decoded(*task, 20)) << "the engine never got going";
  const double cut = epoch_ms(caller.leave());
  expect_work_ended("non-stream, caller leaves, another client streaming", *task, cut);
  EXPECT_FALSE(other.server_closed()) << "the other client's stream must outlast the case";
}

// ---- the deadline -------------------------------------------------------------------------

constexpr int deadline_ms = 1500;

TEST_F(EngineTest, StreamDeadlineTheEngineStops) {
  gateway_process gw{engine_config(engine(), "deadline_ms = 60000\nmax_retries = 0")};
  const auto from = engine().events().size();
  const double sent = epoch_ms_now();
  leaving_client caller(gw.port(), "/v1/chat/completions", chat_request(true, long_tokens),
                        {{"x-request-id", "stream-deadline"},
                         {"x-request-deadline-ms", std::to_string(deadline_ms)}});
  const auto task = launched_task(from);
  ASSERT_TRUE(task);
  // The deadline counts from the request's arrival, which is after `sent`: the cut taken here is
  // at or before tether's, so the time measured from it is not too short.
  const double cut = sent + deadline_ms;
  expect_work_ended("stream, x-request-deadline-ms", *task, cut);
  ASSERT_TRUE(caller.wait_end(5s));
  EXPECT_EQ(caller.status(), 200);
  EXPECT_NE(caller.body().find("stream_interrupted"), std::string::npos) << caller.body();
  auto line = access_line(gw, "stream-deadline");
  ASSERT_TRUE(line);
  EXPECT_EQ(str(line->at("outcome")), "stream_interrupted");
}

TEST_F(EngineTest, NonStreamDeadlineTheEngineStops) {
  gateway_process gw{engine_config(engine(), "deadline_ms = 60000\nmax_retries = 0")};
  const auto from = engine().events().size();
  const double sent = epoch_ms_now();
  leaving_client caller(
      gw.port(), "/v1/chat/completions", chat_request(false, long_tokens),
      {{"x-request-id", "whole-deadline"}, {"x-request-deadline-ms", std::to_string(deadline_ms)}});
  const auto task = launched_task(from);
  ASSERT_TRUE(task);
  const double cut = sent + deadline_ms;
  expect_work_ended("non-stream, x-request-deadline-ms", *task, cut);
  ASSERT_TRUE(caller.wait_end(5s));
  EXPECT_EQ(caller.status(), 504);
  auto line = access_line(gw, "whole-deadline");
  ASSERT_TRUE(line);
  EXPECT_EQ(str(line->at("outcome")), "deadline_exceeded");
}

// ---- the drain ----------------------------------------------------------------------------

constexpr int drain_ms = 1000;

TEST_F(EngineTest, StreamDrainCutTheEngineStops) {
  gateway_process gw{engine_config(engine(), "deadline_ms = 60000\nmax_retries = 0", 64,
                                   "drain_timeout_ms = " + std::to_string(drain_ms))};
  const auto from = engine().events().size();
  leaving_client caller(gw.port(), "/v1/chat/completions", chat_request(true, long_tokens),
                        {{"x-request-id", "stream-drain"}});
  ASSERT_TRUE(caller.wait_events(20, 20s));
  const auto task = launched_task(from);
  ASSERT_TRUE(task);
  const double signalled = epoch_ms_now();
  gw.process().send_signal(SIGTERM);
  expect_work_ended("stream, drain cut", *task, signalled + drain_ms);
  ASSERT_TRUE(caller.wait_end(5s));
  EXPECT_NE(caller.body().find("stream_interrupted"), std::string::npos);
  EXPECT_EQ(gw.process().wait_exit(5s), std::optional<int>(0));
}

TEST_F(EngineTest, NonStreamDrainCutTheEngineStops) {
  gateway_process gw{engine_config(engine(), "deadline_ms = 60000\nmax_retries = 0", 64,
                                   "drain_timeout_ms = " + std::to_string(drain_ms))};
  const auto from = engine().events().size();
  leaving_client caller(gw.port(), "/v1/chat/completions", chat_request(false, long_tokens),
                        {{"x-request-id", "whole-drain"}});
  const auto task = launched_task(from);
  ASSERT_TRUE(task);
  ASSERT_TRUE(decoded(*task, 20));
  const double signalled = epoch_ms_now();
  gw.process().send_signal(SIGTERM);
  expect_work_ended("non-stream, drain cut", *task, signalled + drain_ms);
  ASSERT_TRUE(caller.wait_end(5s));
  EXPECT_EQ(caller.status(), 503);
  EXPECT_EQ(gw.process().wait_exit(5s), std::optional<int>(0));
}

// ---- concurrency with aborts --------------------------------------------------------------

// A chat request whose prompt is `words` words long: each caller of the concurrency case has a
// length of its own, so that it finds its request's task in the engine's log ("new prompt, ...
// task.n_tokens = N").
std::string chat_request_of(int words, bool stream, int max_tokens) {
  std::string content;
  for (int i = 0; i < words; ++i) content += "sea ";
  return R"({"model":"tiny","stream":)" + std::string(stream ? "true" : "false") +
         R"(,"max_tokens":)" + std::to_string(max_tokens) +
         R"(,"messages":[{"role":"user","content":")" + content + R"("}]})";
}

// max_in_flight = 2 in front of a 2-slot engine, three times as many callers, half of their
// requests left mid-generation (streamed and not) once the engine has decoded a few tokens of
// them: the engine must never hold more of tether's requests (decoding, plus deferred for want
// of a slot) than the 2 tether admitted. Sampled from the engine's log at every moment its count
// can grow (a task launched or deferred); every task of this engine is tether's.
void EngineTest::concurrency_with_aborts(const std::string& upstream_keys) {
  constexpr int max_in_flight = 2;
  constexpr int callers = 6;
  constexpr int rounds = 4;
  constexpr int max_tokens = 40;
  const auto prompt_tokens = prompt_tokens_of(
      engine(), callers, [](int c) { return chat_request_of(4 + 3 * c, false, 1); });
  ASSERT_EQ(std::set<int>(prompt_tokens.begin(), prompt_tokens.end()).size(),
            static_cast<std::size_t>(callers))
      << "each caller needs a prompt length of its own";
  const auto workload_from = engine().events().size();

  gateway_process gw{engine_config(engine(), "deadline_ms = 60000\nmax_retries = 0", max_in_flight,
                                   "", upstream_keys)};
  // Half the requests are left once the engine decoded 5 of their tokens, a stream or a whole
  // answer; the others are read whole.
  const auto run = run_leaving_callers(
      engine(), gw.port(),
      {.callers = callers,
       .rounds = rounds,
       .leave_after_tokens = 5,
       .prompt_tokens = prompt_tokens,
       .body = [&](int c, bool stream) { return chat_request_of(4 + 3 * c, stream, max_tokens); },
       .leaves = [](int c, int r) { return (c + r) % 4 < 2; }});
  ASSERT_EQ(await_access_lines(gw, callers * rounds, 30s),
            static_cast<std::size_t>(callers * rounds));

  const auto events = engine().events_from(workload_from);
  const auto tasks = engine_tasks(events);
  int samples = 0;
  int over = 0;
  int most = 0;
  double over_first_ms = -1;
  for (const auto& e : events) {
    if (e.kind != engine_event_kind::launched && e.kind != engine_event_kind::deferred) continue;
    const int held = tasks_held_at(tasks, e.at_ms);
    ++samples;
    most = std::max(most, held);
    if (held > max_in_flight) {
      if (over == 0) over_first_ms = e.at_ms;
      ++over;
    }
  }
  std::printf(
      "[engine] concurrency with aborts: %d callers x %d rounds, %d left mid-generation, %d "
      "answered, %d off-plan; %zu tasks in the engine's log; %d samples, %d over max_in_flight = "
      "%d "
      "(most held at once: %d, first over at engine time %.1f ms)\n",
      callers, rounds, run.left, run.answered, run.off_plan, tasks.size(), samples, over,
      max_in_flight, most, over_first_ms);
  EXPECT_EQ(run.off_plan, 0) << "callers that neither left mid-generation nor got an answer:"
                             << run.notes;
  EXPECT_EQ(run.left, callers * rounds / 2);
  // The workload's tasks: those launched or deferred in the window. A probe's task can still log
  // its release after the window opened (the log is read as the engine writes it), and is no
  // task of the workload's.
  EXPECT_EQ(std::ranges::count_if(
                tasks, [](const auto& t) { return t.second.launched_ms || t.second.deferred_ms; }),
            callers * rounds);
  EXPECT_EQ(over, 0) << "the engine held more of tether's requests than max_in_flight in " << over
                     << " of " << samples << " samples (most: " << most << ")";
  // How long the left requests' slots were held after tether's close, as the access log says.
  std::vector<double> held_ms;
  for (const auto& line : access_lines(gw)) {
    if (str(line.at("outcome")) != "client_disconnected") continue;
    for (const auto& a : line.at("attempts").as_array()) {
      if (!a.at("engine_released_ms").is_null() && !a.at("end_ms").is_null())
        held_ms.push_back(num(a.at("engine_released_ms")) - num(a.at("end_ms")));
    }
  }
  std::sort(held_ms.begin(), held_ms.end());
  if (!held_ms.empty()) {
    std::printf("[engine] slots held after the close: min %.1f, median %.1f, max %.1f ms (%s)\n",
                held_ms.front(), held_ms[held_ms.size() / 2], held_ms.back(),
                upstream_keys.empty() ? "decode steps' grace" : "the engine's count");
  }
}

TEST_F(EngineTest, ConcurrencyWithAbortsTheEngineNeverHoldsMoreThanMaxInFlight) {
  concurrency_with_aborts("");
}

// The same with the engine's metrics read: a left request's slot goes back when the engine's own
// running count says it let go, not after the decode steps' grace.
TEST_F(EngineTest, ConcurrencyWithAbortsReleasedByTheEnginesCountHoldsNoMoreThanMaxInFlight) {
  concurrency_with_aborts("metrics_path = \"/metrics\"\nmetrics_interval_ms = 1000\n");
}

// ---- hand-over on the engine's connection close -------------------------------------------

// llama-server closes the connection after every streamed answer although it advertised
// keep-alive; the next request tether puts on that pooled connection must not fail for it.
// Back-to-back on one caller connection, streamed then not, with no retry to hide a failure.
// The access log's cached_tokens is the engine's own count of the prompt it read from its cache
// (llama-server's prompt_tokens_details.cached_tokens), whole answer or stream (whose caller
// asked for usage): a prompt sent a second time is read from the cache.
TEST_F(EngineTest, TheCachedPartOfThePromptIsTheEnginesCount) {
  gateway_process gw{engine_config(engine(), "deadline_ms = 60000\nmax_retries = 0")};
  http_connection conn(gw.port());
  int cached_seen = 0;
  for (int i = 0; i < 4; ++i) {
    const bool stream = i % 2 == 1;
    const auto id = "cached-" + std::to_string(i);
    // A stream reports usage when its caller asks.
    auto body = chat_request(stream, 2);
    if (stream)
      body.replace(body.find("\"stream\":true"), 13,
                   R"("stream":true,"stream_options":{"include_usage":true})");
    auto r = conn.request("POST", "/v1/chat/completions", body, {{"x-request-id", id}}, 20s);
    ASSERT_EQ(r.status, 200) << r.body;
    // The engine's usage: the whole answer's, or the stream's last chunk that has one.
    boost::json::object usage;
    if (stream) {
      std::istringstream lines(r.body);
      for (std::string line; std::getline(lines, line);) {
        if (line.rfind("data: {", 0) != 0) continue;
        const auto chunk = boost::json::parse(line.substr(6)).as_object();
        if (chunk.contains("usage") && chunk.at("usage").is_object())
          usage = chunk.at("usage").as_object();
      }
    } else {
      usage = boost::json::parse(r.body).at("usage").as_object();
    }
    ASSERT_TRUE(usage.contains("prompt_tokens_details")) << r.body;
    const auto engines = usage.at("prompt_tokens_details").at("cached_tokens").as_int64();
    auto line = access_line(gw, id);
    ASSERT_TRUE(line) << id;
    EXPECT_EQ(line->at("cached_tokens").as_int64(), engines) << id;
    EXPECT_EQ(line->at("prompt_tokens").as_int64(), usage.at("prompt_tokens").as_int64()) << id;
    if (i > 0 && engines > 0) ++cached_seen;
  }
  EXPECT_GT(cached_seen, 0) << "the engine never read the repeated prompt from its cache";
}

TEST_F(EngineTest, HandOverOnTheEnginesConnectionCloseCostsNo502) {
  constexpr int pairs = 100;
  gateway_process gw{engine_config(engine(), "deadline_ms = 60000\nmax_retries = 0")};
  const auto from = engine().events().size();
  http_connection conn(gw.port());
  std::map<int, int> statuses;
  int not_ok = 0;
  for (int i = 0; i < pairs; ++i) {
    for (const bool stream : {true, false}) {
      auto r = conn.request("POST", "/v1/chat/completions", chat_request(stream, 1), {}, 20s);
      ++statuses[r.status];
      if (r.status != 200) {
        ++not_ok;
        ADD_FAILURE() << "pair " << i << (stream ? " (streamed)" : " (not streamed)") << ": "
                      << r.status << " " << r.body;
      }
    }
  }
  std::string seen;
  for (const auto& [status, n] : statuses)
    seen += " " + std::to_string(status) + "x" + std::to_string(n);
  std::printf("[engine] hand-over: %d requests on one caller connection, statuses:%s\n", 2 * pairs,
              seen.c_str());
  EXPECT_EQ(statuses[502], 0);
  EXPECT_EQ(not_ok, 0);
  // Every request reached the engine once: none lost on a dead connection, none run twice.
  auto events = engine().events();
  std::size_t launched = 0;
  for (std::size_t i = from; i < events.size(); ++i)
    if (events[i].kind == engine_event_kind::launched) ++launched;
  EXPECT_EQ(launched, static_cast<std::size_t>(2 * pairs));
}

}  // namespace
}  // namespace tether::test
