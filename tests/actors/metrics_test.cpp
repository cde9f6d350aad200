// Unit tests for metrics: what /metrics renders from the counts the actors keep.
#include "actors/metrics.hpp"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace tether {
namespace {

std::string line_of(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  if (at == std::string::npos) return {};
  return text.substr(at + 1, text.find('\n', at + 1) - at - 1);
}

// A cluster member queues in two places (its budget during an outage, its link waiting for a
// lease); one writer must not overwrite the other's count.
TEST(MetricsTest, TheQueueDepthIsTheSumOfItsOwners) {
  metrics m{{"mock"}};
  m.queue_depth_set(metrics::queue_owner::budget, 2);
  m.queue_depth_set(metrics::queue_owner::link, 3);
  EXPECT_EQ(m.queue_depth(), 5);
  EXPECT_EQ(line_of(m.render(), "tether_queue_depth"), "tether_queue_depth 5");
  m.queue_depth_set(metrics::queue_owner::link, 0);
  EXPECT_EQ(line_of(m.render(), "tether_queue_depth"), "tether_queue_depth 2");
}

// Each io thread counts a request's series in a tally of its own; the scrape is their sum, the
// threads that never bound themselves (and a second metrics object's) included.
TEST(MetricsTest, EachThreadsTallyIsSummedAtTheScrape) {
  metrics m{{"a", "b"}};
  metrics other{{"a"}};
  m.request_done("gpt", outcome::ok, 0.002);  // this thread: not bound
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&m, &other, t] {
      m.bind_this_thread();
      m.bind_this_thread();  // once is enough
      for (int i = 0; i <= t; ++i) {
        m.requests_in_flight_add(1);
        m.request_done("gpt", outcome::ok, 0.02);
        m.attempt_done(1, outcome::ok);
        m.queue_wait(0.001);
        m.tokens_used("k", 0, 10, 2);
      }
      m.requests_in_flight_add(-1);
      other.request_done("gpt", outcome::ok, 0.5);  // a metrics this thread is not bound to
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(m.requests_total("gpt", outcome::ok), 1u + 1u + 2u + 3u);
  EXPECT_EQ(m.requests_in_flight(), 6 - 3);
  EXPECT_EQ(other.requests_total("gpt", outcome::ok), 3u);
  const auto text = m.render();
  EXPECT_EQ(line_of(text, "tether_requests_total{model=\"gpt\",outcome=\"ok\"}"),
            "tether_requests_total{model=\"gpt\",outcome=\"ok\"} 7");
  EXPECT_EQ(line_of(text, "tether_request_duration_seconds_count{model=\"gpt\",outcome=\"ok\"}"),
            "tether_request_duration_seconds_count{model=\"gpt\",outcome=\"ok\"} 7");
  // Only the unbound request took 2 ms or less.
  EXPECT_EQ(
      line_of(text,
              "tether_request_duration_seconds_bucket{model=\"gpt\",outcome=\"ok\",le=\"0.0025\"}"),
      "tether_request_duration_seconds_bucket{model=\"gpt\",outcome=\"ok\",le=\"0.0025\"} 1");
  EXPECT_EQ(line_of(text, "tether_upstream_attempts_total{upstream=\"b\",outcome=\"ok\"}"),
            "tether_upstream_attempts_total{upstream=\"b\",outcome=\"ok\"} 6");
  EXPECT_EQ(line_of(text, "tether_queue_wait_seconds_count"), "tether_queue_wait_seconds_count 6");
  EXPECT_EQ(line_of(text, "tether_tokens_total{key=\"k\",upstream=\"a\",kind=\"prompt\"}"),
            "tether_tokens_total{key=\"k\",upstream=\"a\",kind=\"prompt\"} 60");
  EXPECT_EQ(line_of(text, "tether_requests_in_flight"), "tether_requests_in_flight 3");
}

// An upstream's engine series exist only while it is polled, its requests only while known, and
// orphaned work not at all on a cluster member.
TEST(MetricsTest, EngineSeriesFollowThePollAndWhatItRead) {
  metrics m({"a", "b"});
  const std::string running = R"(tether_engine_requests{upstream="a",state="running"})";
  const std::string orphaned = R"(tether_engine_orphaned_requests{upstream="a"})";
  const std::string failed = R"(tether_engine_metrics_polls_total{upstream="a",result="failed"})";
  EXPECT_EQ(m.render().find("tether_engine_"), std::string::npos) << "nothing polled";
  m.engine_polled(0, true);
  m.engine_poll_done(0, metrics::engine_poll_result::failed);
  auto text = m.render();
  EXPECT_EQ(line_of(text, failed), failed + " 1");
  EXPECT_EQ(line_of(text, running), "") << "unknown until a poll read it";
  EXPECT_EQ(text.find(R"(tether_engine_metrics_polls_total{upstream="b")"), std::string::npos);
  m.engine_counts_set(0, 3, 1, 2);
  text = m.render();
  EXPECT_EQ(line_of(text, running), running + " 3");
  EXPECT_EQ(line_of(text, R"(tether_engine_requests{upstream="a",state="queued"})"),
            R"(tether_engine_requests{upstream="a",state="queued"} 1)");
  EXPECT_EQ(line_of(text, orphaned), orphaned + " 2");
  m.export_orphaned(false);
  EXPECT_EQ(line_of(m.render(), orphaned), "") << "not on a cluster member";
  EXPECT_EQ(line_of(m.render(), running), running + " 3");
  m.engine_counts_unknown(0);
  EXPECT_EQ(line_of(m.render(), running), "");
  m.engine_counts_set(0, 3, 1, 2);
  m.engine_polled(0, false);
  EXPECT_EQ(m.render().find("tether_engine_"), std::string::npos) << "no longer polled: gone";
}

}  // namespace
}  // namespace tether
