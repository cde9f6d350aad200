// The budget holds until the engine has let go, on a real engine (llama.cpp's llama-server,
// contract: "The work ends in the engine"): streaming callers leave mid-generation while others
// wait for tether's max_in_flight = 2 in front of a 2-slot engine. From the engine's own log,
// the engine never holds more of tether's requests (decoding, plus deferred for want of a slot)
// than max_in_flight: with engine = "llamacpp" a cut request's slot is held for the release
// grace, until the engine has stopped decoding it. The same workload with engine = "openai"
// (the slot freed at the close, as before the grace) is run and its figure printed: it is the
// case's "before".
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include "tests/integration/harness.hpp"
#include "tests/support/leaving_client.hpp"
#include "tests/support/llama_engine.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

constexpr int max_in_flight = 2;

std::string stream_request(int max_tokens) {
  return R"({"model":"tiny","stream":true,"max_tokens":)" + std::to_string(max_tokens) +
         R"(,"messages":[{"role":"user","content":"Tell me a long story about the sea."}]})";
}

std::string one_engine_config(const llama_engine& engine, const std::string& kind) {
  return "[server]\nlisten = \"127.0.0.1:0\"\n\n[request]\ndeadline_ms = 60000\nmax_retries = "
         "0\n\n[[upstreams]]\nname = \"llama\"\nbase_url = \"" +
         engine.url() + "\"\nengine = \"" + kind +
         "\"\nsurfaces = [\"chat\", \"completions\"]\nmax_in_flight = " +
         std::to_string(max_in_flight) +
         "\n\n[[models]]\nname = \"tiny\"\nupstream = \"llama\"\nupstream_model = \"tiny\"\n"
         "\n[telemetry]\nlog_format = \"json\"\n";
}

struct held_count {
  int samples = 0;
  int over = 0;
  int most = 0;
  int left = 0;
  int off_plan = 0;
};

// 4 callers, 3 streams each, every other one left after 5 events: 2 run, 2 wait, all the time.
held_count streams_with_aborts(llama_engine& engine, const std::string& kind) {
  constexpr int callers = 4;
  constexpr int rounds = 3;
  gateway_process gw{one_engine_config(engine, kind)};
  std::atomic<int> left{0};
  std::atomic<int> off_plan{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < callers; ++c) {
    threads.emplace_back([&, c] {
      for (int r = 0; r < rounds; ++r) {
        try {
          leaving_client caller(gw.port(), "/v1/chat/completions", stream_request(60));
          if ((c + r) % 2 == 0) {
            if (caller.wait_events(5, 30s)) {
              caller.leave();
              ++left;
            } else {
              ++off_plan;
            }
          } else if (!caller.wait_end(30s) || caller.status() != 200) {
            ++off_plan;
          }
        } catch (const http_error&) {
          ++off_plan;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(await_access_lines(gw, callers * rounds, 30s),
            static_cast<std::size_t>(callers * rounds));
  // Every cut task released by the engine before it is read.
  engine.wait_for([](const engine_event&) { return false; }, 300ms);
  const auto events = engine.events();
  const auto tasks = engine_tasks(events);
  held_count out;
  // Sampled at every moment the count can grow: a task launched or deferred.
  for (const auto& e : events) {
    if (e.kind != engine_event_kind::launched && e.kind != engine_event_kind::deferred) continue;
    const int held = tasks_held_at(tasks, e.at_ms);
    ++out.samples;
    out.most = std::max(out.most, held);
    if (held > max_in_flight) {
      ++out.over;
      // What the engine held then: each task's launch, cancel and release (log ms).
      for (const auto& [id, t] : tasks) {
        const bool running = t.launched_ms && *t.launched_ms <= e.at_ms &&
                             (!t.released_ms || *t.released_ms > e.at_ms);
        if (!running) continue;
        std::printf(
            "  over at %.1f (task %d %s): task %d launched %.1f cancel %.1f released %.1f\n",
            e.at_ms, e.task, e.kind == engine_event_kind::deferred ? "deferred" : "launched", id,
            *t.launched_ms, t.cancel_ms.value_or(-1), t.released_ms.value_or(-1));
      }
    }
  }
  // The graces tether gave the cut streams (slot back − close), from its access log.
  for (const auto& line : access_lines(gw)) {
    const auto& a = line.at("attempts").as_array();
    if (a.empty() || line.at("work_ended_ms").is_null()) continue;
    const double grace = num(a[0].at("engine_released_ms")) - num(line.at("work_ended_ms"));
    if (grace > 0.05)
      std::printf("  a cut stream's slot went back %.1f ms after the close\n", grace);
  }
  out.left = left.load();
  out.off_plan = off_plan.load();
  const auto step = decode_step_ms(events);
  std::printf(
      "[engine] engine = \"%s\", streams with aborts: %d left mid-generation, %d off-plan; %zu "
      "tasks; %d samples, %d over max_in_flight = %d (most held at once: %d); decode step %.1f "
      "ms\n",
      kind.c_str(), out.left, out.off_plan, tasks.size(), out.samples, out.over, max_in_flight,
      out.most, step.value_or(-1));
  return out;
}

class ReleaseGraceEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    auto paths = engine_paths_from_env(why);
    if (!paths) {
      if (engine_required()) FAIL() << "TETHER_REQUIRE_ENGINE=1, but " << why;
      GTEST_SKIP() << "no engine: " << why;
    }
    paths_ = *paths;
  }
  engine_paths paths_;
};

TEST_F(ReleaseGraceEngineTest, TheEngineNeverHoldsMoreOfTethersStreamsThanMaxInFlight) {
  llama_engine engine(paths_);
  const auto held = streams_with_aborts(engine, "llamacpp");
  // Not 0: a stream put on the pooled connection llama-server has just closed can fail before
  // any byte (contract, "A connection the upstream closed is not a failed attempt", built apart);
  // such a caller only makes the workload smaller.
  EXPECT_LE(held.off_plan, 2);
  EXPECT_GE(held.left, 4) << "the workload must have callers leaving";
  EXPECT_GT(held.samples, 0);
  EXPECT_EQ(held.over, 0) << "the engine held more of tether's requests than max_in_flight, "
                          << held.over << " of " << held.samples << " samples (most: " << held.most
                          << ")";
}

// The "before": the slot freed at the close. Printed, not judged (how often the engine is caught
// over depends on the machine's timing).
TEST_F(ReleaseGraceEngineTest, WithEngineOpenaiTheSlotIsFreedAtTheClose) {
  llama_engine engine(paths_);
  const auto held = streams_with_aborts(engine, "openai");
  EXPECT_LE(held.off_plan, 2);
  EXPECT_GT(held.samples, 0);
}

}  // namespace
}  // namespace tether::test
