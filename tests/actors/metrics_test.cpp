// Unit tests for metrics: what /metrics renders from the counts the actors keep.
#include "actors/metrics.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <string>
#include <thread>
#include <vector>

// Counts the calling thread's allocations while `counting` is on, for the test that a request's
// count in an existing series allocates nothing. Not under the sanitizers: ASan owns operator new
// there (and GCC then sees this delete's free as a mismatch).
namespace {
thread_local bool counting = false;
thread_local std::size_t allocations = 0;
}  // namespace

#if !TETHER_SANITIZED
void* operator new(std::size_t n) {
  if (counting) ++allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc{};
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
#endif

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
        m.tokens_used("k", 0, "gpt", {.prompt = 10, .completion = 2});
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
  EXPECT_EQ(line_of(text, R"(tether_tokens_total{key="k",upstream="a",model="gpt",kind="prompt"})"),
            R"(tether_tokens_total{key="k",upstream="a",model="gpt",kind="prompt"} 60)");
  EXPECT_EQ(line_of(text, "tether_requests_in_flight"), "tether_requests_in_flight 3");
}

// Each (key, upstream, model) has the four kinds of tokens; the spend is per key and model,
// whatever upstream served it, printed as an exact decimal of the billionths of a dollar summed.
TEST(MetricsTest, TokensByKeyUpstreamModelAndKindAndSpendPerKeyAndModel) {
  metrics m{{"a", "b"}};
  m.tokens_used("k", 0, "gpt", {.prompt = 100, .completion = 20, .cached = 64, .spend_nanousd = 1});
  m.tokens_used("k", 1, "gpt",
                {.prompt = 7, .completion = 3, .waste = 40, .spend_nanousd = 2'100'000'000});
  m.tokens_used("k", 0, "gpt", {.prompt = 1, .completion = 1, .spend_nanousd = 900'000'000});
  m.tokens_used("k", 0, "free", {.prompt = 5, .completion = 5});
  m.tokens_used("", 1, "gpt", {.prompt = 2, .spend_nanousd = 1});
  const auto text = m.render();
  const std::string on_a = R"(tether_tokens_total{key="k",upstream="a",model="gpt",kind=)";
  EXPECT_EQ(line_of(text, on_a + R"("prompt"})"), on_a + R"("prompt"} 101)");
  EXPECT_EQ(line_of(text, on_a + R"("completion"})"), on_a + R"("completion"} 21)");
  EXPECT_EQ(line_of(text, on_a + R"("cached"})"), on_a + R"("cached"} 64)");
  EXPECT_EQ(line_of(text, on_a + R"("waste"})"), on_a + R"("waste"} 0)");
  const std::string on_b = R"(tether_tokens_total{key="k",upstream="b",model="gpt",kind=)";
  EXPECT_EQ(line_of(text, on_b + R"("waste"})"), on_b + R"("waste"} 40)");
  EXPECT_EQ(line_of(text, on_b + R"("cached"})"), on_b + R"("cached"} 0)");
  EXPECT_EQ(
      line_of(text, R"(tether_tokens_total{key="k",upstream="a",model="free",kind="prompt"})"),
      R"(tether_tokens_total{key="k",upstream="a",model="free",kind="prompt"} 5)");
  EXPECT_EQ(line_of(text, R"(tether_tokens_total{key="",upstream="b",model="gpt",kind="prompt"})"),
            R"(tether_tokens_total{key="",upstream="b",model="gpt",kind="prompt"} 2)");
  // 1 + 2.1e9 + 0.9e9 billionths: 3 dollars and one billionth, on both upstreams together.
  EXPECT_EQ(line_of(text, R"(tether_spend_usd_total{key="k",model="gpt"})"),
            R"(tether_spend_usd_total{key="k",model="gpt"} 3.000000001)");
  EXPECT_EQ(line_of(text, R"(tether_spend_usd_total{key="k",model="free"})"),
            R"(tether_spend_usd_total{key="k",model="free"} 0)");
  EXPECT_EQ(line_of(text, R"(tether_spend_usd_total{key="",model="gpt"})"),
            R"(tether_spend_usd_total{key="",model="gpt"} 0.000000001)");
  m.tokens_used("k", 0, "free", {.spend_nanousd = 2'500'000'000});
  EXPECT_EQ(line_of(m.render(), R"(tether_spend_usd_total{key="k",model="free"})"),
            R"(tether_spend_usd_total{key="k",model="free"} 2.5)");
}

// A request's count runs on the io thread once per request: in a series that exists it copies
// no label (key and model names longer than a short string's inline buffer).
TEST(MetricsTest, CountingInAnExistingSeriesAllocatesNothing) {
  if (TETHER_SANITIZED) GTEST_SKIP() << "allocations are counted only without the sanitizers";
  metrics m{{"a"}};
  m.bind_this_thread();
  const std::string key = "a-key-name-longer-than-sso";
  const std::string model = "a-model-name-longer-than-sso";
  const ledger::usage_record used{.prompt = 10, .completion = 2, .cached = 1, .spend_nanousd = 5};
  m.tokens_used(key, 0, model, used);  // makes the series
  allocations = 0;
  counting = true;
  m.tokens_used(key, 0, model, used);
  m.tokens_used(key, 0, model, used);
  counting = false;
  EXPECT_EQ(allocations, 0u);
  EXPECT_EQ(
      line_of(
          m.render(),
          R"(tether_tokens_total{key="a-key-name-longer-than-sso",upstream="a",model="a-model-name-longer-than-sso",kind="prompt"})"),
      R"(tether_tokens_total{key="a-key-name-longer-than-sso",upstream="a",model="a-model-name-longer-than-sso",kind="prompt"} 30)");
}

// The configured budgets are gauges (none for a key without one, nor for a retired key; a reload
// replaces them), and the ledger's counts against them appear once it has set them.
TEST(MetricsTest, KeyBudgetsAndUsageAreGauges) {
  metrics m{{"a"}};
  config::key_config team;
  team.name = "team";
  team.max_tokens_per_day = 1000;
  team.max_spend_per_month = 12.5;
  config::key_config free_key;
  free_key.name = "free";
  config::key_config gone;
  gone.name = "gone";
  gone.max_tokens_per_month = 5;
  gone.retired = true;
  config::key_config old;
  old.name = "old";
  old.max_spend_per_day = 0.25;
  m.key_budgets_set({team, free_key, gone, old});
  auto text = m.render();
  EXPECT_EQ(line_of(text, R"(tether_key_budget{key="team",period="day",unit="tokens"})"),
            R"(tether_key_budget{key="team",period="day",unit="tokens"} 1000)");
  EXPECT_EQ(line_of(text, R"(tether_key_budget{key="team",period="month",unit="usd"})"),
            R"(tether_key_budget{key="team",period="month",unit="usd"} 12.5)");
  EXPECT_EQ(text.find(R"(tether_key_budget{key="team",period="month",unit="tokens"})"),
            std::string::npos)
      << "no such budget";
  EXPECT_EQ(text.find(R"(tether_key_budget{key="team",period="day",unit="usd"})"),
            std::string::npos);
  EXPECT_EQ(text.find(R"(tether_key_budget{key="free")"), std::string::npos);
  EXPECT_EQ(text.find(R"(tether_key_budget{key="gone")"), std::string::npos) << "retired";
  EXPECT_EQ(line_of(text, R"(tether_key_budget{key="old",period="day",unit="usd"})"),
            R"(tether_key_budget{key="old",period="day",unit="usd"} 0.25)");
  EXPECT_EQ(text.find("tether_key_usage{"), std::string::npos) << "nothing counted yet";

  m.key_usage_set("team", false, 950, 1'250'000'001);
  m.key_usage_set("team", true, 4000, 11'000'000'000);
  m.key_usage_set("team", false, 960, 1'300'000'000);  // the day's count moved on
  text = m.render();
  EXPECT_EQ(line_of(text, R"(tether_key_usage{key="team",period="day",unit="tokens"})"),
            R"(tether_key_usage{key="team",period="day",unit="tokens"} 960)");
  EXPECT_EQ(line_of(text, R"(tether_key_usage{key="team",period="day",unit="usd"})"),
            R"(tether_key_usage{key="team",period="day",unit="usd"} 1.3)");
  EXPECT_EQ(line_of(text, R"(tether_key_usage{key="team",period="month",unit="usd"})"),
            R"(tether_key_usage{key="team",period="month",unit="usd"} 11)");
  m.key_usage_set("free", true, 3, 0);
  text = m.render();
  EXPECT_EQ(line_of(text, R"(tether_key_usage{key="free",period="month",unit="tokens"})"),
            R"(tether_key_usage{key="free",period="month",unit="tokens"} 3)");
  EXPECT_EQ(text.find(R"(tether_key_usage{key="free",period="day")"), std::string::npos)
      << "the day's count not set";

  team.max_tokens_per_day = 0;
  team.max_tokens_per_month = 30000;
  old.retired = true;  // a reload removed it
  m.key_budgets_set({team, free_key, gone, old});
  text = m.render();
  EXPECT_EQ(text.find(R"(tether_key_budget{key="old")"), std::string::npos) << "removed";
  EXPECT_EQ(text.find(R"(tether_key_budget{key="team",period="day",unit="tokens"})"),
            std::string::npos)
      << "the reload dropped it";
  EXPECT_EQ(line_of(text, R"(tether_key_budget{key="team",period="month",unit="tokens"})"),
            R"(tether_key_budget{key="team",period="month",unit="tokens"} 30000)");
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
