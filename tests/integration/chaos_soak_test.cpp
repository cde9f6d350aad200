// The chaos soak (issue 24): a few hundred requests with every kind of ending — fast, slow,
// streamed, hung, failing, reset, cut, stalled, refused; caller deadlines and aborts; retries and
// fallbacks — through two tether-mock upstreams, one of which is killed and restarted mid-run.
// Afterwards the books must balance exactly: each request has one access line agreeing with what
// its caller saw, each logged attempt is a request an upstream received (and the reverse), the
// attempt counter equals what the upstreams received, every gauge is back to 0, no upstream
// connection outlived its caller or deadline, and the gateway's memory stayed bounded.
//
// TETHER_SOAK_SEED picks the plan (printed, so a failure can be replayed); TETHER_SOAK_REQUESTS
// makes the run longer.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "tests/integration/harness.hpp"
#include "tests/support/rss_sampler.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

constexpr bool sanitized = TETHER_SANITIZED;

// The gateway's [request] settings for every model (a few override retries or timeouts).
constexpr int config_deadline_ms = 2500;
constexpr int config_attempt_timeout_ms = 1000;

// How long an upstream connection may outlive its caller's abort or its deadline: the cancel
// crosses two actors and a socket close while sixteen clients, two mocks and the gateway share
// two cores (with another test beside them). Far below the timeouts that could close it instead.
constexpr double late_bound_ms = sanitized ? 1000.0 : 250.0;

// Whether an attempt overlapped ub's kill is read from two clocks that bracket the gateway's
// arrival stamp: the client's write (no later) and the access line's time less its duration (no
// earlier). This room covers what lies between the gateway's stamps and the mock's.
constexpr double kill_window_slack_ms = sanitized ? 200.0 : 50.0;

// An attempt cut (caller gone, deadline) this soon after it started may have been stopped while
// its request was on its way: connecting, or written but not yet read, which the reset then
// discards. The upstream never saw it and the gateway cannot know; such an attempt is the only
// status-less one allowed to be missing from the upstream's log.
constexpr double on_the_way_ms = sanitized ? 50.0 : 10.0;

// The access line's "ts" ("2026-11-30T21:03:18.123Z") in ms since the epoch, rounded up: the
// gateway writes it truncated to the millisecond.
double ts_epoch_ms(const std::string& ts) {
  std::tm tm{};
  int milli = 0;
  if (std::sscanf(ts.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &milli) != 7) {
    // A line whose time cannot be read must not pass the checks that use it unnoticed.
    ADD_FAILURE() << "an access line's ts is not an ISO-8601 UTC time: " << ts;
    return std::numeric_limits<double>::infinity();
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<double>(timegm(&tm)) * 1000.0 + milli + 1.0;
}

struct deployment {
  std::string upstream;
  std::string upstream_model;
};

struct soak_model {
  std::string name;
  int weight;  // relative frequency in the plan
  std::vector<deployment> deployments;
  std::string overrides;  // TOML keys repeated on each of the model's entries
  std::vector<std::string> fallbacks;
};

// "ua" has a tight cap (3) so that attempts queue for its slots; "ub" is the one that is killed.
const std::vector<soak_model>& soak_models() {
  static const std::vector<soak_model> models{
      {"fast", 4, {{"ua", "mock"}, {"ub", "mock"}}, "", {}},
      {"slow", 2, {{"ub", "mock-delay-300"}, {"ua", "mock-delay-300"}}, "", {}},
      {"stream", 3, {{"ua", "mock-stream-6x40"}, {"ub", "mock-stream-6x40"}}, "", {}},
      {"long-stream", 2, {{"ub", "mock-stream-20x50"}}, "", {}},
      {"hang", 1, {{"ua", "mock-hang"}}, "attempt_timeout_ms = 600", {"fast"}},
      {"fail", 1, {{"ub", "mock-fail-503"}}, "max_retries = 2", {"fast"}},
      {"fail-500", 1, {{"ub", "mock-fail-500"}}, "", {}},
      {"flaky", 2, {{"ua", "mock-flaky-50"}, {"ub", "mock-flaky-50"}}, "max_retries = 2", {}},
      {"drop", 2, {{"ua", "mock-drop"}, {"ub", "mock-drop"}}, "", {}},
      {"drop-fb", 1, {{"ub", "mock-drop"}}, "max_retries = 0", {"slow"}},
      {"reset", 1, {{"ua", "mock-reset"}, {"ub", "mock-reset"}}, "", {}},
      {"cut", 1, {{"ub", "mock-sse-cut"}}, "", {}},
      {"stall",
       1,
       {{"ua", "mock-drip-60000"}, {"ub", "mock-drip-60000"}},
       "attempt_timeout_ms = 500",
       {}},
      {"rejected", 1, {{"ua", "mock-fail-400"}}, "", {}},
  };
  return models;
}

std::string soak_config(std::uint16_t port_a, std::uint16_t port_b) {
  std::string cfg = "[server]\nlisten = \"127.0.0.1:0\"\n\n[request]\ndeadline_ms = " +
                    std::to_string(config_deadline_ms) +
                    "\nattempt_timeout_ms = " + std::to_string(config_attempt_timeout_ms) +
                    "\nstream_idle_timeout_ms = 1000\nmax_retries = 1\nretry_backoff_ms = 20\n\n"
                    "[budget]\nmax_in_flight = 10\nqueue_max = 64\nqueue_timeout_ms = 400\n\n";
  cfg += "[[upstreams]]\nname = \"ua\"\nbase_url = \"http://127.0.0.1:" + std::to_string(port_a) +
         "\"\nmax_in_flight = 3\n\n";
  cfg += "[[upstreams]]\nname = \"ub\"\nbase_url = \"http://127.0.0.1:" + std::to_string(port_b) +
         "\"\nmax_in_flight = 6\nconnect_timeout_ms = 500\n\n";
  for (const auto& m : soak_models()) {
    for (const auto& d : m.deployments) {
      cfg += "[[models]]\nname = \"" + m.name + "\"\nupstream = \"" + d.upstream +
             "\"\nupstream_model = \"" + d.upstream_model + "\"\n";
      if (!m.fallbacks.empty()) {
        cfg += "fallbacks = [";
        for (std::size_t i = 0; i < m.fallbacks.size(); ++i) {
          cfg += (i ? ", \"" : "\"") + m.fallbacks[i] + "\"";
        }
        cfg += "]\n";
      }
      if (!m.overrides.empty()) cfg += m.overrides + "\n";
      cfg += "\n";
    }
  }
  cfg += "[telemetry]\nlog_format = \"json\"\n";
  return cfg;
}

struct planned_request {
  std::string id;
  std::string path;
  std::string model;
  bool stream = false;
  std::optional<int> deadline_header;                 // X-Request-Deadline-Ms
  std::optional<std::chrono::milliseconds> abort_at;  // the caller closes its socket then
  bool abort_with_reset = false;
};

std::vector<planned_request> make_plan(std::uint64_t seed, int count) {
  std::mt19937_64 rng(seed);
  auto below = [&](std::uint64_t n) { return static_cast<int>(rng() % n); };
  int total_weight = 0;
  for (const auto& m : soak_models()) total_weight += m.weight;
  static const std::vector<std::string> paths{"/v1/chat/completions", "/v1/completions",
                                              "/v1/embeddings"};
  std::vector<planned_request> plan;
  for (int i = 0; i < count; ++i) {
    planned_request p;
    p.id = "soak-" + std::to_string(seed) + "-" + std::to_string(i);
    int pick = below(total_weight);
    for (const auto& m : soak_models()) {
      if (pick < m.weight) {
        p.model = m.name;
        break;
      }
      pick -= m.weight;
    }
    const int path_pick = below(10);  // chat 5, completions 3, embeddings 2
    p.path = paths[path_pick < 5 ? 0 : path_pick < 8 ? 1 : 2];
    p.stream = p.path != "/v1/embeddings" && below(2) == 0;
    const int deadline_pick = below(100);
    if (deadline_pick < 3) {
      p.deadline_header = 0;
    } else if (deadline_pick < 33) {
      p.deadline_header = 50 + below(1450);
    }
    if (below(5) == 0) {
      p.abort_at = std::chrono::milliseconds(below(700));
      p.abort_with_reset = below(3) == 0;
    }
    plan.push_back(std::move(p));
  }
  return plan;
}

std::string request_body(const planned_request& p) {
  const std::string stream = p.stream ? "true" : "false";
  if (p.path == "/v1/embeddings") return R"({"model":")" + p.model + R"(","input":"hello"})";
  if (p.path == "/v1/completions") {
    return R"({"model":")" + p.model + R"(","prompt":"hello","stream":)" + stream + "}";
  }
  return chat_body(p.model, p.stream);
}

struct observed {
  bool ran = false;
  std::string transport_error;  // http_error: the request could not even be written
  stream_result result;
  double sent_epoch = 0;   // the request written
  double ended_epoch = 0;  // the response ended, or the caller closed (an abort)
};

observed run_request(std::uint16_t port, const planned_request& p) {
  observed o;
  o.ran = true;
  header_map headers{{"x-request-id", p.id}};
  if (p.deadline_header) {
    headers.emplace_back("x-request-deadline-ms", std::to_string(*p.deadline_header));
  }
  stream_options options;
  // Far past the longest the gateway may take (its deadline): a timeout here is a finding.
  options.timeout = std::chrono::milliseconds(config_deadline_ms) + (sanitized ? 15s : 6s);
  options.close_after = p.abort_at;
  options.reset = p.abort_with_reset;
  try {
    o.result = stream_request("POST", port, p.path, request_body(p), headers, options);
    o.sent_epoch = epoch_ms(o.result.sent_at);
    o.ended_epoch = epoch_ms(o.result.ended_at);
  } catch (const http_error& e) {
    o.transport_error = e.what();
  }
  return o;
}

std::uint64_t env_number(const char* name, std::uint64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  return std::stoull(text);
}

// Sum of every series of one counter in a /metrics text.
double counter_sum(const std::string& metrics, const std::string& name) {
  double sum = 0;
  std::istringstream lines(metrics);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(name + "{", 0) != 0 && line.rfind(name + " ", 0) != 0) continue;
    sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

// What one upstream received for a request, from one mock's /_stats log.
struct upstream_record {
  std::string upstream;  // ua, ub
  std::string source;    // ua, ub-before-kill, ub-after-restart
  std::string model;     // the upstream model
  std::optional<int> status;
  std::string outcome;  // completed, closed_by_client, in_progress
  double started_ms = 0;
  std::optional<double> ended_ms;
  std::optional<double> closed_ms;
};

// Findings by kind, each with a few examples: printed together, so one run shows every kind.
class findings {
 public:
  void add(const std::string& kind, const std::string& detail) {
    auto& list = by_kind_[kind];
    ++counts_[kind];
    if (list.size() < 6) list.push_back(detail);
  }
  std::size_t count(const std::string& kind) const {
    auto it = counts_.find(kind);
    return it == counts_.end() ? 0 : it->second;
  }
  void report() const {
    for (const auto& [kind, n] : counts_) {
      std::ostringstream out;
      out << n << " × " << kind << ":";
      for (const auto& d : by_kind_.at(kind)) out << "\n    " << d;
      ADD_FAILURE() << out.str();
    }
  }

 private:
  std::map<std::string, std::vector<std::string>> by_kind_;
  std::map<std::string, std::size_t> counts_;
};

std::string opt_text(const std::optional<double>& v) {
  return v ? std::to_string(static_cast<long long>(*v)) : std::string("null");
}

const char* end_name(stream_end end) {
  switch (end) {
    case stream_end::complete:
      return "complete";
    case stream_end::stopped:
      return "aborted";
    case stream_end::server_closed:
      return "server_closed";
    case stream_end::timed_out:
      return "timed_out";
  }
  return "?";
}

std::string describe(const boost::json::object& line, const std::vector<upstream_record>& recs,
                     const observed& o) {
  std::ostringstream out;
  out << str(line.at("request_id")) << " model=" << str(line.at("model"))
      << " path=" << str(line.at("path")) << " stream=" << line.at("stream").as_bool()
      << " outcome=" << str(line.at("outcome")) << " status=" << line.at("status").as_int64()
      << " duration_ms=" << static_cast<long long>(num(line.at("duration_ms")))
      << " caller_left_ms="
      << (line.at("caller_left_ms").is_null()
              ? std::string("null")
              : std::to_string(static_cast<long long>(num(line.at("caller_left_ms")))))
      << " client_status=" << o.result.status << " client_end=" << end_name(o.result.end)
      << " client_ended_ms=" << static_cast<long long>(o.ended_epoch - o.sent_epoch)
      << " attempts=[";
  for (const auto& a : line.at("attempts").as_array()) {
    const auto& ao = a.as_object();
    out << " " << str(ao.at("upstream")) << ":" << str(ao.at("model")) << ":"
        << (ao.at("status").is_null() ? std::string("-")
                                      : std::to_string(ao.at("status").as_int64()))
        << ":" << str(ao.at("outcome")) << "@" << static_cast<long long>(num(ao.at("start_ms")));
  }
  out << " ] upstream_saw=[";
  for (const auto& r : recs) {
    out << " " << r.source << ":" << (r.status ? std::to_string(*r.status) : "-") << ":"
        << r.outcome << "@+" << static_cast<long long>(r.started_ms - o.sent_epoch);
  }
  out << " ]";
  if (o.result.end == stream_end::server_closed) {
    // What arrived before the close, escaped: the framing is the question then.
    std::string tail = o.result.body.size() > 160 ? o.result.body.substr(o.result.body.size() - 160)
                                                  : o.result.body;
    out << " body_bytes=" << o.result.body.size() << " headers=" << o.result.headers.size()
        << " body_tail=";
    for (char c : tail) {
      if (c == '\n') {
        out << "\\n";
      } else if (c == '\r') {
        out << "\\r";
      } else {
        out << c;
      }
    }
  }
  return out.str();
}

TEST(ChaosSoakTest, EveryRequestAndAttemptIsAccountedForExactly) {
  const std::uint64_t seed = env_number("TETHER_SOAK_SEED", std::random_device{}());
  const int count = static_cast<int>(env_number("TETHER_SOAK_REQUESTS", sanitized ? 150 : 400));
  constexpr int clients = 16;
  std::cout << "soak seed=" << seed << " requests=" << count
            << " (replay: TETHER_SOAK_SEED=" << seed << ")" << std::endl;
  const auto plan = make_plan(seed, count);
  const auto run_started = test_clock::now();

  auto mock_a = std::make_unique<mock_server>();
  auto mock_b = std::make_unique<mock_server>();
  const std::uint16_t port_b = mock_b->port();
  gateway_process gw{soak_config(mock_a->port(), port_b)};
  // ub's successor on the same port, started now: later it would inherit the clients' sockets.
  mock_options same_port;
  same_port.port = port_b;
  auto mock_b_successor = mock_server::standby(same_port);
  const auto baseline_rss = vm_rss_kib(gw.process().pid()).value_or(0);
  rss_sampler rss(gw.process().pid(), 20ms);

  // ---- the run -------------------------------------------------------------------------------
  std::vector<observed> seen(plan.size());
  std::atomic<int> next{0};
  std::mutex finished_mutex;
  std::condition_variable finished_cv;
  int finished = 0;
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      for (int i = next++; i < count; i = next++) {
        seen[i] = run_request(gw.port(), plan[i]);
        std::lock_guard lock(finished_mutex);
        ++finished;
        finished_cv.notify_all();
      }
    });
  }

  // Upstream ub crashes (SIGKILL) with requests on it, and comes back on the same port. What it
  // had received is read just before: only what reaches it between that read and the kill is
  // unknown, and the accounting below allows exactly that much.
  const int kill_after = count * 2 / 5;
  {
    std::unique_lock lock(finished_mutex);
    finished_cv.wait_for(lock, 60s, [&] { return finished >= kill_after; });
  }
  auto before_kill_raw = request("GET", port_b, "/_stats");
  mock_b->kill();
  const double kill_epoch = epoch_ms_now();
  mock_b_successor->release();
  mock_b = std::move(mock_b_successor);
  const double restart_epoch = epoch_ms_now();
  ASSERT_EQ(before_kill_raw.status, 200);
  const auto before_kill = boost::json::parse(before_kill_raw.body).as_object();
  const double snapshot_epoch = num(before_kill.at("now_ms"));

  for (auto& t : threads) t.join();
  const auto load_ended = test_clock::now();

  // ---- quiesce -------------------------------------------------------------------------------
  // Each access line comes once the request's last upstream connection closed, after the answer.
  const auto quiesce_started = test_clock::now();
  const auto lines_seen = await_access_lines(gw, plan.size(), sanitized ? 30s : 10s);
  EXPECT_EQ(lines_seen, plan.size()) << "access lines missing after the quiesce";
  const auto gauge_wait = sanitized ? 15s : 5s;
  EXPECT_TRUE(await_metric(gw.port(), "tether_requests_in_flight", 0, gauge_wait));
  EXPECT_TRUE(await_metric(gw.port(), "tether_queue_depth", 0, gauge_wait));
  for (const char* u : {"ua", "ub"}) {
    EXPECT_TRUE(await_metric(gw.port(),
                             std::string("tether_upstream_work_in_flight{upstream=\"") + u + "\"}",
                             0, gauge_wait))
        << "upstream " << u;
  }
  auto idle = [](const boost::json::object& s) { return s.at("active").as_int64() == 0; };
  const auto stats_a = mock_a->wait_for_stats(idle, gauge_wait);
  const auto stats_b = mock_b->wait_for_stats(idle, gauge_wait);
  EXPECT_EQ(stats_a.at("active").as_int64(), 0) << "ua still working on a request";
  EXPECT_EQ(stats_b.at("active").as_int64(), 0) << "ub still working on a request";
  const auto quiesce_ms = ms_double(test_clock::now() - quiesce_started).count();
  rss.stop();
  const auto metrics_text = request("GET", gw.port(), "/metrics").body;

  // ---- what each side saw --------------------------------------------------------------------
  findings found;
  std::map<std::string, std::vector<boost::json::object>> lines_by_id;
  std::set<std::string> planned_ids;
  for (const auto& p : plan) planned_ids.insert(p.id);
  for (auto& line : access_lines(gw)) {
    const auto id = str(line.at("request_id"));
    if (planned_ids.count(id) == 0) found.add("access line of an unknown request", id);
    lines_by_id[id].push_back(std::move(line));
  }

  std::map<std::string, std::vector<upstream_record>> records_by_id;
  std::size_t upstream_received = 0;
  auto take_log = [&](const boost::json::object& stats, const std::string& upstream,
                      const std::string& source) {
    for (const auto& e : mock_log(stats)) {
      ++upstream_received;
      upstream_record r;
      r.upstream = upstream;
      r.source = source;
      if (!e.at("status").is_null()) r.status = static_cast<int>(e.at("status").as_int64());
      r.outcome = str(e.at("outcome"));
      r.model = str(e.at("model"));
      r.started_ms = num(e.at("started_ms"));
      if (!e.at("ended_ms").is_null()) r.ended_ms = num(e.at("ended_ms"));
      if (!e.at("closed_ms").is_null()) r.closed_ms = num(e.at("closed_ms"));
      const auto& headers = e.at("headers").as_object();
      const auto* id = headers.if_contains("x-request-id");
      if (id == nullptr || planned_ids.count(std::string(id->as_string())) == 0) {
        found.add("upstream request without a known x-request-id",
                  source + " " + str(e.at("path")) + " " + str(e.at("model")));
        continue;
      }
      records_by_id[std::string(id->as_string())].push_back(r);
    }
  };
  take_log(stats_a, "ua", "ua");
  take_log(before_kill, "ub", "ub-before-kill");
  take_log(stats_b, "ub", "ub-after-restart");

  // ---- request by request --------------------------------------------------------------------
  std::map<std::string, int> by_outcome;
  std::size_t logged_attempts = 0;
  // Attempts no upstream log shows: ub's in its kill window, and any cut on its way (above).
  std::size_t unseen_at_kill = 0;
  std::size_t abort_races = 0;  // the caller closed just after the gateway had answered
  std::vector<std::string> unseen_notes;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const auto& p = plan[i];
    const auto& o = seen[i];
    const auto& lines = lines_by_id[p.id];
    const auto& recs = records_by_id[p.id];
    if (lines.size() != 1) {
      found.add("access lines per request != 1", p.id + ": " + std::to_string(lines.size()));
      continue;
    }
    const auto& line = lines.front();
    const auto outcome = str(line.at("outcome"));
    const auto status = static_cast<int>(line.at("status").as_int64());
    const auto& attempts = line.at("attempts").as_array();
    const double arrived_by = ts_epoch_ms(str(line.at("ts"))) - num(line.at("duration_ms"));
    ++by_outcome[outcome];
    logged_attempts += attempts.size();

    // What the caller saw against the access line.
    const auto& r = o.result;
    if (!o.transport_error.empty()) {
      found.add("caller could not send", p.id + ": " + o.transport_error);
    } else if (r.end == stream_end::timed_out) {
      found.add("caller never got an end", describe(line, recs, o));
    } else if (r.end == stream_end::stopped) {
      if (outcome != "client_disconnected") {
        // The caller closed just as the last byte was on its way: the gateway had finished.
        const double caller_left = o.ended_epoch - o.sent_epoch;
        if (num(line.at("duration_ms")) <= caller_left + 20.0) {
          ++abort_races;
        } else {
          found.add("caller left but the outcome is not client_disconnected",
                    describe(line, recs, o));
        }
      } else if (status != 499) {
        found.add("client_disconnected not logged as 499", describe(line, recs, o));
      }
    } else {
      const auto* echoed = r.header("x-request-id");
      if (r.status != 0 && (echoed == nullptr || *echoed != p.id)) {
        found.add("x-request-id not echoed", describe(line, recs, o));
      }
      if (outcome == "client_disconnected") {
        found.add("caller stayed but the outcome is client_disconnected", describe(line, recs, o));
      } else if (r.status == 0) {
        found.add("caller got no response head though the gateway logged status " +
                      std::to_string(status) + " " + outcome,
                  describe(line, recs, o));
      } else if (r.status != status) {
        found.add("caller's status != logged status", describe(line, recs, o));
      } else if (status == 200) {
        const bool interrupted = r.body.find(R"("code":"stream_interrupted")") != std::string::npos;
        if (outcome == "ok") {
          const bool whole = r.end == stream_end::complete &&
                             (!p.stream || r.body.find("data: [DONE]") != std::string::npos);
          if (!whole || interrupted) {
            found.add("logged ok but the caller's answer is not whole", describe(line, recs, o));
          }
        } else if (outcome == "stream_interrupted") {
          if (!p.stream || !interrupted) {
            found.add("stream_interrupted without its error event", describe(line, recs, o));
          }
        } else {
          found.add("status 200 with an error outcome", describe(line, recs, o));
        }
      } else if (outcome != "upstream_rejected") {
        boost::system::error_code ec;
        auto body = boost::json::parse(r.body, ec);
        const auto* error =
            ec || !body.is_object() ? nullptr : body.as_object().if_contains("error");
        const auto* code = error != nullptr && error->is_object()
                               ? error->as_object().if_contains("code")
                               : nullptr;
        if (code == nullptr || !code->is_string() || str(*code) != outcome) {
          found.add("error body code != logged outcome", describe(line, recs, o));
        }
      }
    }

    // The logged attempts against what the upstreams received, upstream by upstream.
    for (const char* upstream : {"ua", "ub"}) {
      const std::string u = upstream;
      std::multiset<int> logged_statuses;
      std::multiset<int> received_statuses;
      std::size_t logged = 0;
      std::size_t may_be_unseen = 0;
      for (const auto& a : attempts) {
        const auto& ao = a.as_object();
        if (str(ao.at("upstream")) != u) continue;
        ++logged;
        if (!ao.at("status").is_null())
          logged_statuses.insert(static_cast<int>(ao.at("status").as_int64()));
        // Reached ub between the read of its log and its kill, or refused while it was down:
        // ub never told anyone. A request that never left the gateway (queued, no slot) does
        // not qualify — it has no status and is not an upstream failure.
        // Earliest it can have begun (from the client's write, no later than the gateway's
        // arrival) and latest it can have ended (from the line's time, no earlier than it).
        const double from = o.sent_epoch + num(ao.at("start_ms"));
        const double to = ao.at("end_ms").is_null() ? std::numeric_limits<double>::infinity()
                                                    : arrived_by + num(ao.at("end_ms"));
        const bool in_window = u == "ub" && from <= restart_epoch + kill_window_slack_ms &&
                               to >= snapshot_epoch - kill_window_slack_ms;
        if (in_window &&
            (!ao.at("status").is_null() || str(ao.at("outcome")) == "upstream_failed")) {
          ++may_be_unseen;
        } else if (str(ao.at("outcome")) == "stale_connection") {
          // Sent on a pooled connection the upstream had closed before it could read it (ub's
          // kill, say), then sent again as the next attempt: the upstream never saw this one.
          ++may_be_unseen;
        } else if (ao.at("status").is_null() && !ao.at("end_ms").is_null() &&
                   (str(ao.at("outcome")) == "client_disconnected" ||
                    str(ao.at("outcome")) == "deadline_exceeded") &&
                   num(ao.at("end_ms")) - num(ao.at("start_ms")) <= on_the_way_ms) {
          ++may_be_unseen;
        }
      }
      std::size_t received = 0;
      for (const auto& rec : recs) {
        if (rec.upstream != u) continue;
        ++received;
        if (rec.status) received_statuses.insert(*rec.status);
      }
      // The kind names what the attempts in question were, so that one cause reads as one kind.
      std::set<std::string> received_models;
      for (const auto& rec : recs) {
        if (rec.upstream == u) received_models.insert(rec.model);
      }
      std::set<std::string> statusless_outcomes;
      for (const auto& a : attempts) {
        const auto& ao = a.as_object();
        if (str(ao.at("upstream")) == u && ao.at("status").is_null()) {
          statusless_outcomes.insert(str(ao.at("outcome")));
        }
      }
      auto joined = [](const std::set<std::string>& names) {
        std::string out;
        for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
        return out;
      };
      if (received > logged) {
        found.add(
            "upstream received more requests than the access log has attempts (upstream "
            "model " +
                joined(received_models) + ")",
            u + " " + describe(line, recs, o));
      } else if (logged - received > may_be_unseen) {
        found.add(
            "access log has attempts the upstream never received (status-less attempts "
            "ending " +
                joined(statusless_outcomes) + ")",
            u + " " + describe(line, recs, o));
      } else {
        if (logged > received) {
          unseen_at_kill += logged - received;
          unseen_notes.push_back(describe(line, recs, o));
        }
        if (received == logged && !std::includes(received_statuses.begin(), received_statuses.end(),
                                                 logged_statuses.begin(), logged_statuses.end())) {
          found.add("logged attempt status the upstream never sent",
                    u + " " + describe(line, recs, o));
        }
      }
    }

    // No upstream work outlived its caller's abort or its deadline by more than the bound.
    if (o.transport_error.empty()) {
      const int deadline =
          std::min(config_deadline_ms, p.deadline_header.value_or(std::numeric_limits<int>::max()));
      double limit = o.sent_epoch + deadline;
      if (r.end == stream_end::stopped) limit = std::min(limit, o.ended_epoch);
      for (const auto& rec : recs) {
        double ended = std::numeric_limits<double>::infinity();
        if (rec.closed_ms) {
          ended = *rec.closed_ms;
        } else if (rec.ended_ms) {
          ended = *rec.ended_ms;
        } else if (rec.source == "ub-before-kill") {
          ended = kill_epoch;  // the kill closed it
        }
        if (ended > limit + late_bound_ms) {
          found.add("upstream work outlived its caller or deadline",
                    "by " + opt_text(ended - limit) + " ms (" + rec.source + ", " + rec.outcome +
                        ") " + describe(line, recs, o));
        }
      }
    }
  }

  // ---- totals and gauges ---------------------------------------------------------------------
  const double attempts_counted = counter_sum(metrics_text, "tether_upstream_attempts_total");
  EXPECT_EQ(attempts_counted, static_cast<double>(logged_attempts))
      << "tether_upstream_attempts_total against the access log's attempts";
  // Around ub's kill an attempt is classified from timestamps (reached ub after its last stats
  // read, or refused while it was down). Under the sanitizers the restart takes long enough that
  // one attempt may fall on the edge of that window (seen once: 165 counted, 164 accounted);
  // the exact check against the access log above still holds there.
  EXPECT_NEAR(attempts_counted, static_cast<double>(upstream_received + unseen_at_kill),
              TETHER_SANITIZED ? 2.0 : 0.0)
      << "tether_upstream_attempts_total against what the upstreams received (" << upstream_received
      << ") and the attempts the upstreams cannot have recorded (" << unseen_at_kill << ")";
  EXPECT_EQ(metric(gw.port(), "tether_requests_in_flight"), 0);
  EXPECT_EQ(metric(gw.port(), "tether_queue_depth"), 0);
  EXPECT_EQ(metric(gw.port(), "tether_upstream_work_in_flight{upstream=\"ua\"}"), 0);
  EXPECT_EQ(metric(gw.port(), "tether_upstream_work_in_flight{upstream=\"ub\"}"), 0);

  std::ostringstream summary;
  summary << "soak seed=" << seed << " requests=" << count;
  for (const auto& [name, n] : by_outcome) summary << " " << name << "=" << n;
  summary << " attempts=" << logged_attempts << " upstream_received=" << upstream_received
          << " (ua=" << mock_log(stats_a).size()
          << " ub_before_kill=" << mock_log(before_kill).size()
          << " ub_after_restart=" << mock_log(stats_b).size() << ")"
          << " unseen_at_kill=" << unseen_at_kill << " abort_races=" << abort_races
          << " ub_down_ms=" << static_cast<long long>(restart_epoch - kill_epoch)
          << " load_s=" << ms_double(load_ended - run_started).count() / 1000.0
          << " quiesce_ms=" << static_cast<long long>(quiesce_ms)
          << " rss_baseline_mib=" << baseline_rss / 1024.0
          << " rss_peak_mib=" << rss.peak_kib() / 1024.0
          << " rss_end_mib=" << rss.last_kib() / 1024.0 << " rss_samples=" << rss.samples();
  std::cout << summary.str() << std::endl;
  for (const auto& note : unseen_notes) std::cout << "  unseen at ub's kill: " << note << "\n";
  found.report();

  // Sixteen callers with bodies of a few KiB need little memory: the gateway's resident set may
  // grow by a bounded working set over its idle size, not with the number of requests served.
  // Sanitizer builds hold freed memory in ASan's quarantine (256 MiB by default) on top.
  const std::uint64_t rss_growth_bound_kib = (sanitized ? 384 : 32) * 1024;
  EXPECT_LE(rss.peak_kib(), baseline_rss + rss_growth_bound_kib)
      << "tether's VmRSS grew from " << baseline_rss << " KiB to " << rss.peak_kib() << " KiB";

  // ---- shutdown: every upstream connection closes with the gateway ----------------------------
  gw.process().send_signal(SIGTERM);
  EXPECT_EQ(gw.process().wait_exit(sanitized ? 30s : 10s), 0);
  auto no_connections = [](const boost::json::object& s) {
    return s.at("connections_open").as_int64() == 0;
  };
  EXPECT_EQ(mock_a->wait_for_stats(no_connections).at("connections_open").as_int64(), 0);
  EXPECT_EQ(mock_b->wait_for_stats(no_connections).at("connections_open").as_int64(), 0);
}

}  // namespace
}  // namespace tether::test
