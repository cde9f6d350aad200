// The abandon scenario's reading of llama-server's own log: lines as llama-server (the snapshot
// in ../shared/engines) writes them with `-v --log-timestamps --log-prefix --log-colors off`.
#include "bench/bench/engine_log.hpp"

#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace tether::bench {
namespace {

TEST(EngineLog, TimestampIsMinutesSecondsMillisMicros) {
  EXPECT_DOUBLE_EQ(*engine_log_ms("0.04.254.594 D srv ..."), 4254.594);
  EXPECT_DOUBLE_EQ(*engine_log_ms("12.03.001.020 I slot ..."), 12 * 60000.0 + 3001.02);
  EXPECT_FALSE(engine_log_ms("\trepeat_last_n = 64, repeat_penalty = 1.000"));
  EXPECT_FALSE(engine_log_ms("ggml_cpu: 0.01"));
}

TEST(EngineLog, ATaskFromDeferToStop) {
  engine_log log("");
  for (const char* line : {
           "0.04.254.500 D que          post: new task, id = 8/1, front = 0",
           "0.04.254.594 D srv  process_sing: no slot is available, defer task, id_task = 8",
           "0.04.254.611 D que         defer: defer task, id = 8",
           "0.04.300.000 D que          post: new task, id = 9, front = 1",
           "0.05.100.000 I slot launch_slot_: id  1 | task 8 | processing task, is_child = 0",
           "0.05.200.000 D slot process_toke: id  1 | task 8 | n_decoded = 1, n_remaining = 39, "
           "next token:   642 ' city'",
           "0.05.240.000 D slot process_toke: id  1 | task 8 | n_decoded = 2, n_remaining = 38, "
           "next token:    10 '",
           "'",  // the token's text went on after a newline
           "0.05.250.000 W srv          stop: cancel task, id_task = 8",
           "0.05.280.000 D slot process_toke: id  1 | task 8 | n_decoded = 3, n_remaining = 37, "
           "next token:   282 ' w'",
           "0.05.290.000 I slot      release: id  1 | task 8 | stop processing: n_tokens = 20, "
           "truncated = 0",
       }) {
    log.parse_line(line);
  }
  const auto& t = log.tasks().at(8);
  EXPECT_DOUBLE_EQ(*t.posted_ms, 4254.5);
  EXPECT_DOUBLE_EQ(*t.deferred_ms, 4254.594);  // the first of its defer lines
  EXPECT_DOUBLE_EQ(*t.launched_ms, 5100.0);
  EXPECT_DOUBLE_EQ(*t.cancelled_ms, 5250.0);
  EXPECT_DOUBLE_EQ(*t.stopped_ms, 5290.0);
  EXPECT_EQ(*t.max_tokens, 40u);
  ASSERT_EQ(t.token_ms.size(), 3u);
  EXPECT_DOUBLE_EQ(t.token_ms.back(), 5280.0);
  // Tokens after a moment: those stamped later (the scenario's verdict on each leave).
  EXPECT_EQ(tokens_after(t, 5100.0), 3u);
  EXPECT_EQ(tokens_after(t, 5200.0), 2u);  // the token stamped at that moment came before
  EXPECT_EQ(tokens_after(t, 5250.0), 1u);
  EXPECT_EQ(tokens_after(t, 5280.0), 0u);
  // The cancel task itself (posted to the front) is no work of a request.
  EXPECT_FALSE(log.tasks().count(9));
  EXPECT_TRUE(log.idle());
}

TEST(EngineLog, NotIdleWhileASlotRunsOrATaskWaits) {
  engine_log log("");
  log.parse_line(
      "0.01.000.000 I slot launch_slot_: id  0 | task 3 | processing task, is_child = 0");
  EXPECT_FALSE(log.idle());
  log.parse_line(
      "0.01.500.000 I slot      release: id  0 | task 3 | stop processing: n_tokens = "
      "9, truncated = 0");
  EXPECT_TRUE(log.idle());
  log.parse_line("0.01.600.000 D que         defer: defer task, id = 4");
  EXPECT_FALSE(log.idle());
  log.parse_line("0.01.700.000 W srv          stop: cancel task, id_task = 4");
  EXPECT_TRUE(log.idle());  // cancelled while deferred: never launched
}

TEST(EngineLog, ReadsWhatWasWrittenSinceTheLastPoll) {
  const std::string path = ::testing::TempDir() + "engine_log_test.log";
  std::ofstream out(path, std::ios::trunc);
  out << "0.01.000.000 I slot launch_slot_: id  0 | task 3 | processing task, is_child = 0\n"
      << "0.01.100.000 I slot      release: id  0 | task 3 | stop proc" << std::flush;
  engine_log log(path);
  log.poll();
  EXPECT_FALSE(log.idle());  // the release line is not whole yet
  out << "essing: n_tokens = 9, truncated = 0\n" << std::flush;
  log.poll();
  EXPECT_TRUE(log.idle());
  EXPECT_DOUBLE_EQ(*log.tasks().at(3).stopped_ms, 1100.0);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tether::bench
