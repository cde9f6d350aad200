// The reader of llama-server's log (tests/support/llama_engine.hpp), on lines captured from the
// engine the tests run (llama.cpp 0253fb21, `-v --log-timestamps --log-colors off`): a stream
// cut after 2 tokens, and three requests on two slots, one of them deferred.
#include "tests/support/llama_engine.hpp"

#include <gtest/gtest.h>

namespace tether::test {
namespace {

const std::vector<std::string> captured = {
    "0.04.832.811 D que    start_loop: processing task, id = 0",
    "0.04.833.030 I srv  log_server_r: done request: GET /slots 127.0.0.1 200",
    "0.05.081.555 D que    start_loop: processing task, id = 1",
    "0.05.081.656 I slot launch_slot_: id  1 | task 1 | processing task, is_child = 0",
    "0.05.081.669 I slot update_slots: id  1 | task 1 | new prompt, n_ctx_slot = 2048, n_keep = "
    "0, task.n_tokens = 17",
    "0.05.397.228 D slot process_toke: id  1 | task 1 | n_decoded = 1, n_remaining = 4, next "
    "token:   427 ' no'",
    "0.05.456.897 D slot process_toke: id  1 | task 1 | n_decoded = 2, n_remaining = 3, next "
    "token:   440 ' down'",
    "0.05.717.744 W srv          stop: cancel task, id_task = 1",
    "0.05.753.529 D slot process_toke: id  1 | task 1 | n_decoded = 3, n_remaining = 1, next "
    "token:   563 ' without'",
    "0.05.753.624 I slot      release: id  1 | task 1 | stop processing: n_tokens = 20, "
    "truncated = 0",
    // A request's launch logs the sampler under "task -1" with continuation lines (a tab, no
    // timestamp): neither is an event.
    "0.06.490.113 I slot launch_slot_: id  0 | task -1 | sampler chain: logits -> ?penalties",
    "\trepeat_last_n = 64, repeat_penalty = 1.000, frequency_penalty = 0.000",
    "0.06.490.123 I slot launch_slot_: id  0 | task 15 | processing task, is_child = 0",
    "0.06.490.124 D que    start_loop: processing task, id = 16",
    "0.06.490.125 D srv  process_sing: no slot is available, defer task, id_task = 16",
    "0.06.490.125 D que         defer: defer task, id = 16",
    "\x1b[0m0.06.791.327 D slot process_toke: id  0 | task 15 | n_decoded = 1, n_remaining = 29, "
    "next token:   427 ' no'",
    "0.06.798.369 I slot launch_slot_: id  1 | task 16 | processing task, is_child = 0",
    "1.02.088.544 D slot process_toke: id  0 | task 15 | n_decoded = 2, n_remaining = 28, next "
    "token:   440 ' down'",
    "1.02.186.386 D slot process_toke: id  0 | task 15 | n_decoded = 3, n_remaining = 27, next "
    "token:   480 ' work'",
};

TEST(LlamaEngineLogTest, ReadsTheEnginesOwnEvents) {
  const auto events = parse_engine_log(captured);
  ASSERT_EQ(events.size(), 15u);

  EXPECT_EQ(events[0].kind, engine_event_kind::request);
  EXPECT_EQ(events[0].path, "GET /slots");
  EXPECT_DOUBLE_EQ(events[0].at_ms, 4833.030);

  EXPECT_EQ(events[1].kind, engine_event_kind::launched);
  EXPECT_EQ(events[1].task, 1);
  EXPECT_EQ(events[1].slot, 1);
  EXPECT_DOUBLE_EQ(events[1].at_ms, 5081.656);

  EXPECT_EQ(events[2].kind, engine_event_kind::prompt);
  EXPECT_EQ(events[2].n_prompt, 17);

  EXPECT_EQ(events[3].kind, engine_event_kind::token);
  EXPECT_EQ(events[3].task, 1);
  EXPECT_EQ(events[3].n_decoded, 1);
  EXPECT_DOUBLE_EQ(events[3].at_ms, 5397.228);

  EXPECT_EQ(events[5].kind, engine_event_kind::cancel);
  EXPECT_EQ(events[5].task, 1);
  EXPECT_DOUBLE_EQ(events[5].at_ms, 5717.744);

  EXPECT_EQ(events[7].kind, engine_event_kind::released);
  EXPECT_EQ(events[7].task, 1);
  EXPECT_EQ(events[7].slot, 1);
  EXPECT_DOUBLE_EQ(events[7].at_ms, 5753.624);

  EXPECT_EQ(events[8].kind, engine_event_kind::launched);
  EXPECT_EQ(events[8].task, 15);
  EXPECT_EQ(events[9].kind, engine_event_kind::deferred);
  EXPECT_EQ(events[9].task, 16);
  EXPECT_EQ(events[10].kind, engine_event_kind::deferred);
  EXPECT_EQ(events[10].task, 16);
  // After the colour reset.
  EXPECT_EQ(events[11].kind, engine_event_kind::token);
  EXPECT_EQ(events[11].task, 15);
  // Minutes count: 1.02.088.544 is 62 088.544 ms.
  EXPECT_DOUBLE_EQ(events[13].at_ms, 62088.544);
}

TEST(LlamaEngineLogTest, TasksStepAndWhatTheEngineHolds) {
  const auto events = parse_engine_log(captured);
  const auto tasks = engine_tasks(events);
  ASSERT_EQ(tasks.count(1), 1u);
  const auto& first = tasks.at(1);
  EXPECT_EQ(first.n_prompt, 17);
  EXPECT_EQ(first.token_ms.size(), 3u);
  EXPECT_DOUBLE_EQ(*first.cancel_ms, 5717.744);
  EXPECT_DOUBLE_EQ(*first.released_ms, 5753.624);
  EXPECT_DOUBLE_EQ(*tasks.at(16).deferred_ms, 6490.125);
  EXPECT_DOUBLE_EQ(*tasks.at(16).launched_ms, 6798.369);

  // Gaps: task 1: 59.669, 296.632; task 15: 55297.217, 97.842. The median of four is the upper
  // middle one.
  ASSERT_TRUE(decode_step_ms(events));
  EXPECT_NEAR(*decode_step_ms(events), 296.632, 1e-6);

  EXPECT_EQ(tasks_held_at(tasks, 5000.0), 0);
  EXPECT_EQ(tasks_held_at(tasks, 5081.656), 1);  // launched at that moment
  EXPECT_EQ(tasks_held_at(tasks, 5753.624), 0);  // released at that moment
  // Task 15 running, task 16 deferred: two held.
  EXPECT_EQ(tasks_held_at(tasks, 6490.125), 2);
  EXPECT_EQ(tasks_held_at(tasks, 6700.0), 2);
  EXPECT_EQ(tasks_held_at(tasks, 6800.0), 2);  // 16 now running
}

TEST(LlamaEngineLogTest, ADeferredTaskCancelledBeforeItRanIsNoLongerHeld) {
  const auto events =
      parse_engine_log({"0.01.000.000 D srv  process_sing: no slot is available, defer task, "
                        "id_task = 7",
                        "0.01.500.000 W srv          stop: cancel task, id_task = 7"});
  const auto tasks = engine_tasks(events);
  EXPECT_EQ(tasks_held_at(tasks, 1200.0), 1);
  EXPECT_EQ(tasks_held_at(tasks, 1600.0), 0);
}

TEST(LlamaEngineLogTest, OtherLinesAreNoEvents) {
  EXPECT_FALSE(parse_engine_log_line("main: server is listening on http://127.0.0.1:8080"));
  EXPECT_FALSE(parse_engine_log_line("0.00.133.721 D sched_reserve: worst-case: n_tokens = 512"));
  EXPECT_FALSE(parse_engine_log_line("0.06.490.124 D que    start_loop: processing task, id = 16"));
  EXPECT_FALSE(parse_engine_log_line(""));
}

}  // namespace
}  // namespace tether::test
