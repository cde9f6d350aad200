// The engine's own account from outside (docs/contract.md, "The work ends in the engine": engine
// metrics), against a real llama.cpp llama-server started with --metrics: tether polls its
// /metrics (engine = "llamacpp", the engine's default series), exports its running and queued
// requests, and shows as orphaned only the work no live request of tether's accounts for — a
// client that talks to the engine directly, never tether's own requests, streamed or not, served
// or left by their callers. And the poll, traffic to the engine, does not slow the end of the
// engine's work when tether's caller leaves. Judged from the engine's own log (its tasks
// launched, deferred and released) and its own /metrics.
//
// Each case prints what it measured ("[engine metrics] ...").
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/harness.hpp"
#include "tests/support/leaving_client.hpp"
#include "tests/support/llama_engine.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

constexpr int interval_ms = 100;  // the least metrics_interval_ms: the most traffic to the engine

const std::string running = R"(tether_engine_requests{upstream="llama",state="running"})";
const std::string queued = R"(tether_engine_requests{upstream="llama",state="queued"})";
const std::string orphaned = R"(tether_engine_orphaned_requests{upstream="llama"})";
const std::string polls_ok = R"(tether_engine_metrics_polls_total{upstream="llama",result="ok"})";

// A chat request whose prompt is `words` words long: callers of one case each have a length of
// their own, so that each finds its request's task in the engine's log ("new prompt, ...
// task.n_tokens = N").
std::string chat_request(bool stream, int max_tokens, int words = 8) {
  std::string content;
  for (int i = 0; i < words; ++i) content += "sea ";
  return R"({"model":"tiny","stream":)" + std::string(stream ? "true" : "false") +
         R"(,"max_tokens":)" + std::to_string(max_tokens) +
         R"(,"messages":[{"role":"user","content":")" + content + R"("}]})";
}

// One upstream "llama" (llama-server, engine = "llamacpp", its default upstream_stream and
// series) with `engine_keys`, one model "tiny" on it.
std::string engine_config(const llama_engine& engine, const std::string& engine_keys) {
  return "[server]\nlisten = \"127.0.0.1:0\"\n\n[request]\ndeadline_ms = 60000\nmax_retries = "
         "0\n\n[[upstreams]]\nname = \"llama\"\nbase_url = \"" +
         engine.url() +
         "\"\nengine = \"llamacpp\"\nsurfaces = [\"chat\", \"completions\"]\nmax_in_flight = 64\n" +
         engine_keys +
         "\n\n[[models]]\nname = \"tiny\"\nupstream = \"llama\"\nupstream_model = \"tiny\"\n"
         "\n[telemetry]\nlog_format = \"json\"\n";
}

const std::string polled =
    "metrics_path = \"/metrics\"\nmetrics_interval_ms = " + std::to_string(interval_ms) + "\n";

// One series' value in a Prometheus text; nullopt when absent.
std::optional<double> series_in(const std::string& text, const std::string& series) {
  const std::string body = "\n" + text;
  const auto at = body.find("\n" + series + " ");
  if (at == std::string::npos) return std::nullopt;
  return std::stod(body.substr(at + series.size() + 2));
}

// The engine's own /metrics: (requests_processing, requests_deferred).
std::pair<double, double> engine_counts(const llama_engine& engine) {
  const auto text = request("GET", engine.port(), "/metrics", {}, {}, 5s).body;
  return {series_in(text, "llamacpp:requests_processing").value_or(-1),
          series_in(text, "llamacpp:requests_deferred").value_or(-1)};
}

// tether's engine gauges read over and over on a thread of their own, for the whole of a case's
// workload: the most each showed, and when orphaned work was first and last shown.
class gauge_sampler {
 public:
  explicit gauge_sampler(std::uint16_t port) : port_(port), thread_([this] { run(); }) {}
  ~gauge_sampler() { stop(); }

  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  struct sample {
    double at_ms = 0;  // epoch ms, when the read came back
    double running = -1;
    double queued = -1;
    double orphaned = -1;  // -1: absent
    double polls = -1;     // the engine's counts read so far
  };
  std::vector<sample> samples() const {
    std::lock_guard lock(mutex_);
    return samples_;
  }

 private:
  void run() {
    while (!stop_) {
      sample s;
      try {
        const auto text = request("GET", port_, "/metrics", {}, {}, 5s).body;
        s.running = series_in(text, running).value_or(-1);
        s.queued = series_in(text, queued).value_or(-1);
        s.orphaned = series_in(text, orphaned).value_or(-1);
        s.polls = series_in(text, polls_ok).value_or(-1);
      } catch (const http_error&) {
      }
      s.at_ms = epoch_ms_now();
      {
        std::lock_guard lock(mutex_);
        samples_.push_back(s);
      }
      std::this_thread::sleep_for(5ms);  // a sampling rate, not a synchronisation
    }
  }

  std::uint16_t port_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mutex_;
  std::vector<sample> samples_;
  std::thread thread_;
};

// Waits (bounded) until the gateway has read the engine's counts `n` more times.
bool await_more_polls(std::uint16_t port, int n) {
  const double from = metric(port, polls_ok);
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < until) {
    if (metric(port, polls_ok) >= from + n) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

double most(const std::vector<gauge_sampler::sample>& samples,
            double gauge_sampler::sample::*field) {
  double m = -1;
  for (const auto& s : samples) m = std::max(m, s.*field);
  return m;
}

class EngineMetricsLlamaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    auto paths = engine_paths_from_env(why);
    if (!paths) {
      if (engine_required()) FAIL() << "TETHER_REQUIRE_ENGINE=1, but " << why;
      GTEST_SKIP() << "no engine: " << why;
    }
    engine_ = std::make_unique<llama_engine>(*paths);
  }

  llama_engine& engine() { return *engine_; }

  // The first task the engine launched at or after event `from` whose id is not in `except`.
  std::optional<int> launched_task(std::size_t from, const std::set<int>& except = {}) {
    auto e = engine().wait_for(
        [&](const engine_event& ev) {
          return ev.kind == engine_event_kind::launched && except.count(ev.task) == 0;
        },
        20s, from);
    if (!e) return std::nullopt;
    return e->task;
  }

  bool decoded(int task, int n, std::size_t from = 0) {
    return engine()
        .wait_for(
            [&](const engine_event& e) {
              return e.kind == engine_event_kind::token && e.task == task && e.n_decoded >= n;
            },
            20s, from)
        .has_value();
  }

  std::optional<engine_event> released(int task, std::chrono::milliseconds timeout = 30s) {
    return engine().wait_for(
        [&](const engine_event& e) {
          return e.kind == engine_event_kind::released && e.task == task;
        },
        timeout);
  }

  std::unique_ptr<llama_engine> engine_;
};

// ---- tether's own requests are never orphaned --------------------------------------------

// Three callers in front of a 2-slot engine (so that one waits inside the engine, deferred),
// each sending in turn a stream it reads whole, a non-streaming request it waits for, a stream
// it leaves after a few events and a non-streaming request it leaves once the engine decoded a
// few of its tokens. tether's requests start, queue, end and are cut at every moment of the
// polls; the gauge, sampled throughout and for a grace after, never shows orphaned work.
TEST_F(EngineMetricsLlamaTest, TethersOwnRequestsStreamedOrNotLeftOrNotAreNeverOrphaned) {
  constexpr int callers = 3;
  constexpr int rounds = 4;
  constexpr int max_tokens = 20;
  const auto prompt_tokens =
      prompt_tokens_of(engine(), callers, [](int c) { return chat_request(false, 1, 4 + 3 * c); });
  ASSERT_EQ(std::set<int>(prompt_tokens.begin(), prompt_tokens.end()).size(),
            static_cast<std::size_t>(callers))
      << "each caller needs a prompt length of its own";
  gateway_process gw{engine_config(engine(), polled)};
  ASSERT_TRUE(await_metric(gw.port(), running, 0, 5s));
  const double polls_before = metric(gw.port(), polls_ok);
  const auto workload_from = engine().events().size();

  gauge_sampler sampler(gw.port());
  // Of each caller's four requests in turn: a stream read whole, a whole answer, a stream left
  // and a whole answer left, once the engine decoded 5 of their tokens.
  const auto run = run_leaving_callers(
      engine(), gw.port(),
      {.callers = callers,
       .rounds = rounds,
       .leave_after_tokens = 5,
       .prompt_tokens = prompt_tokens,
       .body = [&](int c, bool stream) { return chat_request(stream, max_tokens, 4 + 3 * c); },
       .leaves = [](int c, int r) { return (c + r) % 4 >= 2; }});
  ASSERT_EQ(await_access_lines(gw, callers * rounds, 30s),
            static_cast<std::size_t>(callers * rounds));
  // The engine let every task go (its gauge reads 0) ...
  EXPECT_TRUE(await_metric(gw.port(), running, 0, 5s));
  // ... and the gauge is sampled on through twice the grace after the last of tether's work.
  ASSERT_TRUE(await_more_polls(gw.port(), 6));
  sampler.stop();

  const auto events = engine().events_from(workload_from);
  const auto tasks = engine_tasks(events);
  int deferred = 0;
  int cancelled = 0;
  int unreleased = 0;
  for (const auto& [id, t] : tasks) {
    if (t.deferred_ms) ++deferred;
    if (t.cancel_ms) ++cancelled;
    if (!t.released_ms) ++unreleased;
  }
  const auto samples = sampler.samples();
  const double polls = metric(gw.port(), polls_ok) - polls_before;
  std::printf(
      "[engine metrics] tether's own work: %d requests (%d answered, %d left mid-generation, %d "
      "off-plan); engine: %zu tasks, %d deferred, %d cancelled, %d not released; %.0f polls; "
      "%zu samples of the gauges: running up to %.0f, queued up to %.0f, orphaned up to %.0f\n",
      callers * rounds, run.answered, run.left, run.off_plan, tasks.size(), deferred, cancelled,
      unreleased, polls, samples.size(), most(samples, &gauge_sampler::sample::running),
      most(samples, &gauge_sampler::sample::queued),
      most(samples, &gauge_sampler::sample::orphaned));
  EXPECT_EQ(run.off_plan, 0) << run.notes;
  EXPECT_EQ(run.left, callers * rounds / 2);
  // Every task in the engine was tether's, and each ended.
  // The workload's tasks: those launched or deferred in the window (a probe's task can still log
  // its release after the window opened).
  EXPECT_EQ(std::ranges::count_if(
                tasks, [](const auto& t) { return t.second.launched_ms || t.second.deferred_ms; }),
            callers * rounds);
  EXPECT_EQ(unreleased, 0);
  EXPECT_GE(cancelled, run.left) << "the engine saw each left request cancelled";
  // The polls saw tether's work in the engine: what follows is not vacuous.
  EXPECT_GE(polls, 10);
  EXPECT_GE(most(samples, &gauge_sampler::sample::running), 2);
  for (const auto& s : samples) {
    EXPECT_NE(s.orphaned, -1) << "the gauge went missing at " << s.at_ms;
    EXPECT_EQ(s.orphaned, 0) << "tether's own work shown orphaned at epoch ms " << s.at_ms
                             << " (running " << s.running << ", queued " << s.queued << ")";
    if (s.orphaned != 0) break;
  }
}

// ---- a client that talks to the engine directly --------------------------------------------

// While one of tether's streams runs, a client sends the engine a long generation directly: the
// engine runs two requests, tether has one live, so once the excess held through three polls
// (two intervals after the engine took the direct request at the least) one request is orphaned
// — not two. It goes back to 0 when the engine's work for it ended (its last token; no cancel).
TEST_F(EngineMetricsLlamaTest, ADirectClientsGenerationIsOrphanedAfterTheGraceAndGoesWhenItEnds) {
  constexpr int direct_tokens = 80;
  gateway_process gw{engine_config(engine(), polled)};
  ASSERT_TRUE(await_metric(gw.port(), running, 0, 5s));

  auto from = engine().events().size();
  leaving_client own(gw.port(), "/v1/chat/completions", chat_request(true, 2000),
                     {{"x-request-id", "own-stream"}});
  ASSERT_TRUE(own.wait_events(5, 20s)) << "tether's stream never got going";
  const auto own_task = launched_task(from);
  ASSERT_TRUE(own_task);
  ASSERT_TRUE(await_metric(gw.port(), running, 1, 5s));

  gauge_sampler sampler(gw.port());
  from = engine().events().size();
  leaving_client direct(engine().port(), "/v1/chat/completions", chat_request(true, direct_tokens));
  const auto direct_task = launched_task(from, {*own_task});
  ASSERT_TRUE(direct_task);
  ASSERT_TRUE(await_metric(gw.port(), orphaned, 1, 10s)) << "the direct client's work never shown";
  ASSERT_TRUE(released(*direct_task)) << "the engine never ended the direct request";
  ASSERT_TRUE(await_metric(gw.port(), orphaned, 0, 5s)) << "the orphaned work never went";
  EXPECT_TRUE(direct.wait_end(5s) && direct.status() == 200 && direct.complete())
      << "the direct client got its whole answer: " << direct.status();
  EXPECT_FALSE(own.server_closed()) << "tether's stream outlasted the direct request";
  const double own_left_ms = epoch_ms(own.leave());
  ASSERT_TRUE(released(*own_task));
  ASSERT_TRUE(await_metric(gw.port(), running, 0, 5s));
  ASSERT_TRUE(await_more_polls(gw.port(), 4));
  sampler.stop();

  const auto tasks = engine_tasks(engine().events());
  const auto& d = tasks.at(*direct_task);
  ASSERT_TRUE(d.launched_ms && d.released_ms);
  const double launched_ms = engine().to_epoch_ms(*d.launched_ms);
  const double released_ms = engine().to_epoch_ms(*d.released_ms);
  const double clock_error = engine().clock_error_ms();
  const auto samples = sampler.samples();
  // Counted in polls (a poll's round trip waits for the engine's decode step, so times say
  // little): `before`, the polls read by the last sample in which the engine's count did not yet
  // show the direct request; `shown`, by the first that showed it orphaned; `after`, by the first
  // taken after the engine let it go.
  double before = -1;
  double shown = -1;
  double first_shown_ms = -1;
  double last_shown_ms = -1;
  double after = -1;
  for (const auto& s : samples) {
    if (s.running < 2 && first_shown_ms < 0 && s.at_ms < released_ms) before = s.polls;
    if (s.orphaned >= 1) {
      if (first_shown_ms < 0) {
        first_shown_ms = s.at_ms;
        shown = s.polls;
      }
      last_shown_ms = s.at_ms;
    }
    if (after < 0 && s.at_ms > released_ms + clock_error) after = s.polls;
  }
  std::printf(
      "[engine metrics] direct client: task %d, %zu tokens, no cancel: %s; orphaned shown %.0f "
      "ms after the engine launched it, %.0f polls after the last that did not see it (grace: "
      "3 polls of %d ms), at most %.0f at once; last shown %.0f ms after the engine released "
      "it; clocks tied within %.2f ms\n",
      *direct_task, d.token_ms.size(), d.cancel_ms ? "no" : "yes", first_shown_ms - launched_ms,
      shown - before, interval_ms, most(samples, &gauge_sampler::sample::orphaned),
      last_shown_ms - released_ms, clock_error);
  EXPECT_EQ(d.token_ms.size(), static_cast<std::size_t>(direct_tokens));
  EXPECT_FALSE(d.cancel_ms) << "the direct request ran to its end";
  EXPECT_EQ(most(samples, &gauge_sampler::sample::orphaned), 1)
      << "one request orphaned, not tether's own too";
  ASSERT_GE(before, 0);
  ASSERT_GT(first_shown_ms, 0);
  ASSERT_GE(after, 0);
  // The grace: the first poll that saw the direct request is at least before + 1 (or before
  // itself, had that sample been rendered between the poll's count and its gauges); the third in
  // a row shows it.
  EXPECT_GE(shown - before, 2) << "orphaned before three polls in a row saw the excess";
  for (const auto& s : samples) {
    // From its first showing until tether's stream left, the gauge is the engine's own count
    // (read by the same poll) less tether's one request: 1 while the engine ran both, 0 from the
    // first poll that read it without the direct request.
    if (s.at_ms >= first_shown_ms && s.at_ms < own_left_ms) {
      EXPECT_EQ(s.orphaned, s.running - 1)
          << "at epoch ms " << s.at_ms << " the engine ran " << s.running << " requests";
    }
    // One poll may be out at the release (sent before it) and one more counted before its
    // gauges are set: from the third poll after the first sample past the release, every poll
    // read the engine without it.
    if (s.polls >= after + 3) {
      EXPECT_EQ(s.orphaned, 0) << "still shown " << s.polls - after
                               << " polls after the engine let it go, at epoch ms " << s.at_ms;
    }
  }
  EXPECT_EQ(metric(gw.port(), orphaned), 0);
}

// ---- the gauges follow the engine's own count ---------------------------------------------

// Three of tether's streams on a 2-slot engine: two run, one is deferred inside the engine
// (its log says so), and tether's gauges read 2 running, 1 queued, as the engine's own /metrics
// does (llamacpp:requests_processing, llamacpp:requests_deferred: the default series of engine
// = "llamacpp"). One caller leaves: the deferred one takes its slot, 2 and 0. All leave: 0 and 0.
TEST_F(EngineMetricsLlamaTest, TheRequestGaugesFollowTheEnginesOwnMetrics) {
  gateway_process gw{engine_config(engine(), polled)};
  ASSERT_TRUE(await_metric(gw.port(), running, 0, 5s));
  EXPECT_EQ(metric(gw.port(), queued), 0);
  EXPECT_EQ(engine_counts(engine()), std::make_pair(0.0, 0.0));

  // One after another, so that each caller knows its task.
  const auto from = engine().events().size();
  std::vector<std::unique_ptr<leaving_client>> callers;
  std::set<int> held;
  for (int i = 0; i < 2; ++i) {
    callers.push_back(std::make_unique<leaving_client>(gw.port(), "/v1/chat/completions",
                                                       chat_request(true, 2000)));
    const auto task = launched_task(from, held);
    ASSERT_TRUE(task);
    held.insert(*task);
  }
  const int first = *held.begin();
  const int second = *held.rbegin();
  callers.push_back(std::make_unique<leaving_client>(gw.port(), "/v1/chat/completions",
                                                     chat_request(true, 2000)));
  const auto deferral = engine().wait_for(
      [](const engine_event& e) { return e.kind == engine_event_kind::deferred; }, 20s, from);
  ASSERT_TRUE(deferral) << "the engine never deferred the third request";
  const int third = deferral->task;

  EXPECT_TRUE(await_metric(gw.port(), running, 2, 5s));
  EXPECT_TRUE(await_metric(gw.port(), queued, 1, 5s));
  EXPECT_EQ(engine_counts(engine()), std::make_pair(2.0, 1.0)) << "the engine's own /metrics";
  EXPECT_EQ(metric(gw.port(), orphaned), 0);

  // The first caller leaves: the engine ends its task and launches the deferred one.
  const auto cut_from = engine().events().size();
  callers[0]->leave();
  ASSERT_TRUE(released(first));
  ASSERT_TRUE(engine()
                  .wait_for(
                      [&](const engine_event& e) {
                        return e.kind == engine_event_kind::launched && e.task == third;
                      },
                      20s, cut_from)
                  .has_value())
      << "the deferred task never got the slot";
  EXPECT_TRUE(await_metric(gw.port(), queued, 0, 5s));
  EXPECT_EQ(metric(gw.port(), running), 2);
  EXPECT_EQ(engine_counts(engine()), std::make_pair(2.0, 0.0)) << "the engine's own /metrics";

  for (auto& c : callers) c->leave();
  ASSERT_TRUE(released(second));
  ASSERT_TRUE(released(third));
  EXPECT_TRUE(await_metric(gw.port(), running, 0, 5s));
  EXPECT_EQ(metric(gw.port(), queued), 0);
  EXPECT_EQ(engine_counts(engine()), std::make_pair(0.0, 0.0)) << "the engine's own /metrics";
  EXPECT_EQ(metric(gw.port(), orphaned), 0);
  EXPECT_EQ(
      metric_if_present(
          gw.port(), R"(tether_engine_metrics_polls_total{upstream="llama",result="unreadable"})")
          .value_or(0),
      0);
}

// ---- the poll does not slow tether's own cancellations ------------------------------------

double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// One gateway in front of one engine, its poll of the engine's /metrics (every 100 ms) turned on
// and off by reloads in alternate phases of one run (the poll is traffic to the whole engine,
// whichever gateway sends it: a second gateway polling beside a plain one would load both
// alike). In each phase callers leave a stream and a non-streaming request mid-generation on an
// engine otherwise idle. Counted in the engine's own unit, the tokens it decoded after the caller
// left (time per token varies under the machine's load; the count does not): with the poll
// every cut within the contract's bound (two decode steps plus 50 ms, as tokens at the median
// step), as without it, and for each kind the median with the poll no more than one token above
// the median without it. The times, from the caller leaving to the engine's slot let go, and
// tether's own cancel_latency_ms are printed.
TEST_F(EngineMetricsLlamaTest, ThePollDoesNotSlowTethersOwnCancellations) {
  constexpr int rounds = 5;
  constexpr int tokens_before_cut = 10;
  const auto plain_config = engine_config(engine(), "");
  const auto polled_config = engine_config(engine(), polled);
  gateway_process gw{plain_config};
  const auto workload_from = engine().events().size();

  struct cut_at {
    bool polled = false;
    bool stream = false;
    int task = -1;
    double cut_log_ms = 0;
    std::string id;
  };
  std::vector<cut_at> cuts;
  double polls = 0;  // the engine's counts read during the polled phases
  for (int r = 0; r < rounds; ++r) {
    for (int j = 0; j < 2; ++j) {
      const bool is_polled = (r + j) % 2 == 1;  // each phase goes first in half the rounds
      ASSERT_NE(
          reload(gw, is_polled ? polled_config : plain_config).value_or("").find("config reloaded"),
          std::string::npos);
      if (is_polled) {
        ASSERT_TRUE(await_metric(gw.port(), running, 0, 5s));
        ASSERT_TRUE(await_more_polls(gw.port(), 2)) << "the poll never got going";
      } else {
        ASSERT_FALSE(metric_if_present(gw.port(), polls_ok)) << "the poll goes with its path";
      }
      const double polls_from = metric_if_present(gw.port(), polls_ok).value_or(0);
      for (const bool stream : {true, false}) {
        const std::string id = "cut-" + std::to_string(cuts.size());
        const auto from = engine().events().size();
        leaving_client caller(gw.port(), "/v1/chat/completions", chat_request(stream, 400),
                              {{"x-request-id", id}});
        const auto task = launched_task(from);
        ASSERT_TRUE(task);
        ASSERT_TRUE(decoded(*task, tokens_before_cut, from)) << "the engine never got going";
        ASSERT_FALSE(caller.complete());
        const double cut = epoch_ms(caller.leave());
        ASSERT_TRUE(released(*task, 60s)) << "the engine never let task " << *task << " go";
        cuts.push_back({is_polled, stream, *task, engine().to_log_ms(cut), id});
      }
      if (is_polled) polls += metric(gw.port(), polls_ok) - polls_from;
    }
  }

  const auto events = engine().events_from(workload_from);
  const auto tasks = engine_tasks(events);
  const auto step = decode_step_ms(events);
  ASSERT_TRUE(step);
  // The contract's bound, two decode steps plus 50 ms, in the engine's tokens.
  const double bound = 2 + 50 / *step;
  std::vector<double> latency[2][2];  // [polled][stream]
  std::vector<double> tokens_after[2][2];
  std::vector<double> tether_cancel[2][2];
  for (const auto& c : cuts) {
    const auto& t = tasks.at(c.task);
    const double ended = *t.released_ms - c.cut_log_ms;
    const auto after = std::count_if(t.token_ms.begin(), t.token_ms.end(),
                                     [&](double at) { return at > c.cut_log_ms; });
    latency[c.polled][c.stream].push_back(ended);
    tokens_after[c.polled][c.stream].push_back(static_cast<double>(after));
    EXPECT_GT(ended, 0.0) << "task " << c.task << " ended before its cut: nothing was tested";
    EXPECT_LE(after, bound) << (c.polled ? "polled" : "plain") << ", "
                            << (c.stream ? "streamed" : "not streamed") << ": task " << c.task
                            << " decoded " << after << " tokens (" << ended
                            << " ms) after its caller left; allowed " << bound
                            << " (2 decode steps + 50 ms at a step of " << *step << " ms)";
    // tether's own side: from the caller leaving to its upstream connection closed.
    auto line = access_line(gw, c.id);
    ASSERT_TRUE(line) << c.id;
    EXPECT_EQ(str(line->at("outcome")), "client_disconnected");
    tether_cancel[c.polled][c.stream].push_back(num(line->at("cancel_latency_ms")));
  }
  for (int p = 0; p < 2; ++p) {
    for (int k = 0; k < 2; ++k) {
      const auto& ms = latency[p][k];
      const auto& tk = tokens_after[p][k];
      std::printf(
          "[engine metrics] %s, %s: %zu cuts, caller left -> engine released: median %.1f ms "
          "(%.2f steps), max %.1f ms; tokens after the cut: median %.1f, max %.0f; tether's "
          "cancel_latency_ms median %.2f\n",
          p ? "polled every 100 ms" : "not polled", k ? "streamed" : "not streamed", ms.size(),
          median(ms), median(ms) / *step, *std::max_element(ms.begin(), ms.end()), median(tk),
          *std::max_element(tk.begin(), tk.end()), median(tether_cancel[p][k]));
      if (p == 1) {
        EXPECT_LE(median(tk), median(tokens_after[0][k]) + 1)
            << (k ? "streamed" : "not streamed")
            << ": the poll slowed the end of tether's cancelled work by more than a decode step";
      }
    }
  }
  std::printf(
      "[engine metrics] decode step %.1f ms; %.0f polls during the polled phases; bound %.1f "
      "tokens\n",
      *step, polls, bound);
  EXPECT_GE(polls, 2 * rounds);
}

}  // namespace
}  // namespace tether::test
