// Client disconnect, at every phase of a request's life and on every surface (promise 4 of the
// contract): the caller goes away at an observed event, and then the upstream sees its
// connection close promptly (every timeout here is a minute, so only the cancellation can explain
// a close), the budget slot comes back (the gauge says 0 and a next request gets through), and
// the request ends in exactly one access line saying `client_disconnected`.
//
// Each phase is the gateway's own state when the caller leaves, not only the upstream's: its
// gauges (queued, a retry decided), the kernel's socket table (a connect under way), and its
// access line, whose attempt times say whether the response head had arrived when it saw the
// caller leave. A trial whose gateway was elsewhere is run again: it says nothing.
#include <gtest/gtest.h>
#include <sys/types.h>

#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "tests/integration/harness.hpp"
#include "tests/support/leaving_client.hpp"
#include "tests/support/silent_upstream.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

enum class phase {
  queued,              // waiting for a slot another request holds (upstream cap 1)
  connecting_tls,      // TCP connected, the TLS handshake unanswered
  connecting_tcp,      // the SYN unanswered (a full backlog)
  waiting_headers,     // the upstream has the request and says nothing (mock-hang)
  headers_no_body,     // response head received, no body byte (mock-drip-60000)
  before_first_event,  // stream head received, the first event half a minute away
  mid_stream,          // the caller has received some events
  retry_backoff,       // a 503 was answered, the retry is sleeping
};

struct surface {
  const char* name;
  const char* path;
  bool stream;
};

struct matrix_case {
  surface where;
  phase when;
};

const char* phase_name(phase p) {
  switch (p) {
    case phase::queued:
      return "queued";
    case phase::connecting_tls:
      return "connecting_tls";
    case phase::connecting_tcp:
      return "connecting_tcp";
    case phase::waiting_headers:
      return "waiting_headers";
    case phase::headers_no_body:
      return "headers_no_body";
    case phase::before_first_event:
      return "before_first_event";
    case phase::mid_stream:
      return "mid_stream";
    case phase::retry_backoff:
      return "retry_backoff";
  }
  return "?";
}

std::string case_name(const matrix_case& c) {
  return std::string(c.where.name) + "_" + phase_name(c.when);
}

void PrintTo(const matrix_case& c, std::ostream* os) {
  *os << case_name(c);
}

// Embeddings never stream; the two stream-only phases exist only where a stream does.
std::vector<matrix_case> all_cases() {
  const std::vector<surface> surfaces{{"chat", "/v1/chat/completions", false},
                                      {"chat_stream", "/v1/chat/completions", true},
                                      {"completions", "/v1/completions", false},
                                      {"completions_stream", "/v1/completions", true},
                                      {"embeddings", "/v1/embeddings", false},
                                      {"responses", "/v1/responses", false},
                                      {"responses_stream", "/v1/responses", true},
                                      {"messages", "/v1/messages", false},
                                      {"messages_stream", "/v1/messages", true},
                                      {"count_tokens", "/v1/messages/count_tokens", false}};
  std::vector<matrix_case> out;
  for (auto p : {phase::queued, phase::connecting_tls, phase::connecting_tcp,
                 phase::waiting_headers, phase::headers_no_body, phase::before_first_event,
                 phase::mid_stream, phase::retry_backoff}) {
    const bool stream_only = p == phase::before_first_event || p == phase::mid_stream;
    for (const auto& s : surfaces) {
      if (stream_only && !s.stream) continue;
      out.push_back({s, p});
    }
  }
  return out;
}

std::string body_for(const surface& s, const std::string& model) {
  const std::string stream = s.stream ? "true" : "false";
  if (std::string(s.path) == "/v1/embeddings")
    return R"({"model":")" + model + R"(","input":"hello"})";
  if (std::string(s.path) == "/v1/completions")
    return R"({"model":")" + model + R"(","prompt":"hello","stream":)" + stream + "}";
  if (std::string(s.path) == "/v1/responses")
    return R"({"model":")" + model + R"(","input":"hello","stream":)" + stream + "}";
  if (std::string(s.path).rfind("/v1/messages", 0) == 0)
    return R"({"model":")" + model +
           R"(","max_tokens":16,"messages":[{"role":"user","content":"hello"}],"stream":)" +
           stream + "}";
  return chat_body(model, s.stream);
}

// From the caller's close to the upstream's: the cancel crosses the io thread, an actor and the
// upstream's socket, on a 2-core machine running two tests at a time (and slower instrumented).
// Every timeout that could close the connection otherwise is 60 s.
constexpr double close_bound_ms = TETHER_SANITIZED ? 1000.0 : 300.0;
// The kernel's first SYN retransmission comes 1 s after the connect (its initial RTO).
constexpr auto past_syn_retransmit = TETHER_SANITIZED ? 2500ms : 1500ms;
// The retry's backoff ceiling (full jitter: the sleep is uniform in [0, this]).
constexpr double backoff_ms = 2500;
constexpr double backoff_slack_ms = TETHER_SANITIZED ? 1500.0 : 500.0;

std::string upstream_entry(const std::string& name, const std::string& base_url) {
  return "[[upstreams]]\nname = \"" + name + "\"\nbase_url = \"" + base_url + "\"\n" +
         every_surface + "\nmax_in_flight = 1\nconnect_timeout_ms = 60000\n\n";
}

std::string model_on(const std::string& name, const std::string& upstream,
                     const std::string& upstream_model, const std::string& more = "") {
  return "[[models]]\nname = \"" + name + "\"\nupstream = \"" + upstream +
         "\"\nupstream_model = \"" + upstream_model + "\"\n" + more + "\n";
}

// Every upstream has one slot, so a slot that never came back stops the next request.
std::string matrix_config(const mock_server& mock, const silent_upstream& tls,
                          const silent_upstream& syn) {
  return "[server]\nlisten = \"127.0.0.1:0\"\n\n[request]\ndeadline_ms = 60000\n"
         "attempt_timeout_ms = 60000\nstream_idle_timeout_ms = 60000\nmax_retries = 0\n\n" +
         upstream_entry("mock", mock.url()) +
         upstream_entry("tls", "https://127.0.0.1:" + std::to_string(tls.port())) +
         upstream_entry("syn", "http://127.0.0.1:" + std::to_string(syn.port())) +
         model_on("hang", "mock", "mock-hang") + model_on("fast", "mock", "mock") +
         model_on("drip", "mock", "mock-drip-60000") +
         model_on("slow_first", "mock", "mock-stream-3x30000") +
         model_on("long", "mock", "mock-stream-1000x20") +
         model_on("flaky", "mock", "mock-fail-503",
                  "max_retries = 1\nretry_backoff_ms = " +
                      std::to_string(static_cast<int>(backoff_ms))) +
         model_on("tls", "tls", "mock-hang") + model_on("syn", "syn", "mock-hang") +
         "[telemetry]\nlog_format = \"json\"\n";
}

const char* model_for(phase p) {
  switch (p) {
    case phase::queued:
    case phase::waiting_headers:
      return "hang";
    case phase::connecting_tls:
      return "tls";
    case phase::connecting_tcp:
      return "syn";
    case phase::headers_no_body:
      return "drip";
    case phase::before_first_event:
      return "slow_first";
    case phase::mid_stream:
      return "long";
    case phase::retry_backoff:
      return "flaky";
  }
  return "?";
}

std::string upstream_for(phase p) {
  if (p == phase::connecting_tls) return "tls";
  if (p == phase::connecting_tcp) return "syn";
  return "mock";
}

std::string work_series(const std::string& upstream) {
  return "tether_upstream_work_in_flight{upstream=\"" + upstream + "\"}";
}

// Whether process `pid` has a socket in SYN_SENT to 127.0.0.1:`port`: the kernel's own word that
// its connect is under way and unanswered. Its sockets are known by inode (/proc/<pid>/fd) and
// looked up in /proc/net/tcp.
bool connect_pending(pid_t pid, std::uint16_t port) {
  std::set<std::string> inodes;
  std::error_code ec;
  for (const auto& fd :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    const auto target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::ifstream table("/proc/net/tcp");
  std::string row;
  std::getline(table, row);  // the column names
  while (std::getline(table, row)) {
    std::istringstream fields(row);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
        timeout >> inode;
    constexpr const char* syn_sent = "02";
    if (state != syn_sent || inodes.count(inode) == 0) continue;
    if (remote.rfind("0100007F:", 0) == 0 && std::stoul(remote.substr(9), nullptr, 16) == port)
      return true;
  }
  return false;
}

// No event says that a connect has begun: bounded polling of the kernel's table.
bool await_connect_pending(pid_t pid, std::uint16_t port, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!connect_pending(pid, port)) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

class DisconnectMatrix : public ::testing::TestWithParam<matrix_case> {
 public:
  static void SetUpTestSuite() {
    std::printf("disconnect matrix: %zu cases\n", all_cases().size());
  }

 protected:
  // One trial; `redo` when the gateway was not in the phase when it saw the caller leave (the
  // jittered backoff drew a sleep shorter than the caller's way out; the gateway had not yet
  // read a response head the upstream had sent), which says nothing about the gateway.
  void run(const matrix_case& c, bool& redo);
};

void DisconnectMatrix::run(const matrix_case& c, bool& redo) {
  redo = false;
  const std::string id = "leaver-" + case_name(c);
  const std::string upstream = upstream_for(c.when);
  mock_server mock;
  silent_upstream tls{silent_upstream::mode::never_answers};
  silent_upstream syn{silent_upstream::mode::never_accepts};
  gateway_process gw{matrix_config(mock, tls, syn)};

  std::optional<leaving_client> holder;
  if (c.when == phase::queued) {
    holder.emplace(gw.port(), "/v1/chat/completions", chat_body("hang"),
                   header_map{{"x-request-id", "holder"}});
    auto held =
        mock.wait_for_stats([](const auto& s) { return !entries_of(s, "holder").empty(); }, 5s);
    ASSERT_EQ(entries_of(held, "holder").size(), 1u) << "the holder never reached the mock";
  }

  leaving_client caller{
      gw.port(), c.where.path, body_for(c.where, model_for(c.when)), {{"x-request-id", id}}};
  // The phase, by an event each.
  switch (c.when) {
    case phase::queued:
      ASSERT_TRUE(await_metric(gw.port(), "tether_queue_depth", 1, 5s)) << "never queued";
      break;
    case phase::connecting_tls:
      ASSERT_TRUE(tls.wait_for(
          [](const auto& cs) { return !cs.empty() && cs[0].first_byte_ms.has_value(); }, 5s))
          << "no ClientHello reached the silent upstream";
      break;
    case phase::connecting_tcp:
      // Nothing reaches a listener whose backlog is full: the kernel says the gateway's connect
      // is under way.
      ASSERT_TRUE(await_connect_pending(gw.process().pid(), syn.port(), 5s))
          << "the gateway has no connect under way to the silent upstream";
      break;
    case phase::waiting_headers: {
      // The mock has the whole request and never answers (mock-hang).
      auto s = mock.wait_for_stats([&](const auto& st) { return !entries_of(st, id).empty(); }, 5s);
      ASSERT_EQ(entries_of(s, id).size(), 1u) << "the request never reached the mock";
      break;
    }
    case phase::headers_no_body:
    case phase::before_first_event: {
      // The mock has sent the head, and its first body byte or event is half a minute or more
      // away; whether the gateway had read the head when it saw the caller leave, its access
      // line says (head_ms, checked at the end).
      auto s = mock.wait_for_stats(
          [&](const auto& st) {
            auto es = entries_of(st, id);
            return !es.empty() && !es[0].at("status").is_null();
          },
          5s);
      auto es = entries_of(s, id);
      ASSERT_EQ(es.size(), 1u) << "the request never reached the mock";
      ASSERT_FALSE(es[0].at("status").is_null()) << "the mock never sent the head";
      ASSERT_EQ(caller.status(), 0) << "the gateway already answered: " << caller.body();
      break;
    }
    case phase::mid_stream:
      ASSERT_TRUE(caller.wait_events(2, 5s)) << "no events arrived: " << caller.body();
      ASSERT_EQ(caller.status(), 200);
      break;
    case phase::retry_backoff: {
      auto s = mock.wait_for_stats(
          [&](const auto& st) {
            auto es = entries_of(st, id);
            return !es.empty() && str(es[0].at("outcome")) == "completed";
          },
          5s);
      auto es = entries_of(s, id);
      ASSERT_FALSE(es.empty()) << "the first attempt never reached the mock";
      ASSERT_EQ(es[0].at("status").as_int64(), 503);
      // The gateway decided to retry (a retry counts as started from its decision, through its
      // backoff) and gave the first attempt's slot back, so a retry begun before the caller
      // leaves would hold a slot at once and show in the access line's attempts.
      ASSERT_TRUE(await_metric(gw.port(),
                               "tether_retries_total{upstream=\"mock\",result=\"started\"}", 1, 5s))
          << "the gateway never decided to retry";
      ASSERT_TRUE(await_metric(gw.port(), work_series("mock"), 0, 5s));
      break;
    }
  }
  const double left = epoch_ms(caller.leave());

  // What the upstream saw.
  switch (c.when) {
    case phase::queued:
      break;  // checked at the end: nothing, ever
    case phase::connecting_tls: {
      ASSERT_TRUE(tls.wait_for([](const auto& cs) { return cs[0].closed_ms.has_value(); }, 5s))
          << "the stalled TLS handshake's connection stayed open";
      const double latency = *tls.connections()[0].closed_ms - left;
      std::printf("[%s] upstream closed %.1f ms after the caller\n", case_name(c).c_str(), latency);
      EXPECT_LT(latency, close_bound_ms);
      break;
    }
    case phase::connecting_tcp: {
      // Let the kernel complete a SYN that is still being retransmitted, and wait past the
      // retransmission: a connect the cancel did not abort would arrive now.
      syn.start_accepting();
      std::this_thread::sleep_for(past_syn_retransmit);
      EXPECT_TRUE(syn.connections().empty())
          << "the connect outlived its caller: it completed after the backlog freed up";
      break;
    }
    case phase::waiting_headers:
    case phase::headers_no_body:
    case phase::before_first_event:
    case phase::mid_stream: {
      auto s = mock.wait_for_stats(
          [&](const auto& st) {
            auto es = entries_of(st, id);
            return es.size() == 1 && str(es[0].at("outcome")) != "in_progress";
          },
          5s);
      auto es = entries_of(s, id);
      ASSERT_EQ(es.size(), 1u);
      ASSERT_EQ(str(es[0].at("outcome")), "closed_by_client") << "the upstream work ran on";
      const double latency = num(es[0].at("closed_ms")) - left;
      std::printf("[%s] upstream closed %.1f ms after the caller\n", case_name(c).c_str(), latency);
      EXPECT_LT(latency, close_bound_ms);
      break;
    }
    case phase::retry_backoff: {
      // Where the gateway was when it saw the caller leave, by its own times: a second attempt
      // begun by then (or an answer before it) means the backoff was over.
      auto line = access_line(gw, id);
      ASSERT_TRUE(line) << "no access line for " << id;
      const auto& attempts = line->at("attempts").as_array();
      const auto& seen_left = line->at("caller_left_ms");
      if (attempts.size() > 1 &&
          (seen_left.is_null() || num(attempts[1].at("start_ms")) < num(seen_left))) {
        redo = true;
        return;
      }
      ASSERT_FALSE(seen_left.is_null()) << boost::json::serialize(*line);
      ASSERT_EQ(attempts.size(), 1u)
          << "a retry began after its caller had left: " << boost::json::serialize(*line);
      EXPECT_EQ(attempts[0].at("status"), 503);
      EXPECT_LT(num(attempts[0].at("end_ms")), num(seen_left))
          << "the gateway had not read the 503: it was waiting for headers";
      auto es = entries_of(mock.stats(), id);
      ASSERT_FALSE(es.empty());
      // The retry was due at most the backoff ceiling after the 503: wait past that.
      const double due = num(es[0].at("ended_ms")) + backoff_ms + backoff_slack_ms;
      const double wait = due - epoch_ms_now();
      if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(wait));
      EXPECT_EQ(entries_of(mock.stats(), id).size(), 1u)
          << "a retry reached the upstream after its caller had left";
      break;
    }
  }

  // The caller's slot (or queue place) came back.
  if (c.when == phase::queued) {
    EXPECT_TRUE(await_metric(gw.port(), "tether_queue_depth", 0, 5s));
    holder->leave();
  }
  EXPECT_TRUE(await_metric(gw.port(), work_series(upstream), 0, 5s))
      << "the budget slot of " << upstream << " was not given back";
  EXPECT_TRUE(await_metric(gw.port(), "tether_requests_in_flight", 0, 5s));
  // And a next request on the same one-slot upstream gets to it.
  if (upstream == "mock") {
    auto next = request("POST", gw.port(), c.where.path, body_for(c.where, "fast"),
                        {{"x-request-deadline-ms", "5000"}}, 10s);
    EXPECT_EQ(next.status, 200) << next.body;
  } else {
    auto& silent = upstream == "tls" ? tls : syn;
    const auto before = silent.connections().size();
    if (upstream == "syn") syn.start_accepting();
    auto next = request("POST", gw.port(), c.where.path, body_for(c.where, upstream),
                        {{"x-request-deadline-ms", "1500"}}, 10s);
    EXPECT_EQ(next.status, 504) << next.body;
    EXPECT_EQ(silent.connections().size(), before + 1)
        << "the next request never reached the upstream: its slot was still taken";
  }

  auto line = access_line(gw, id);
  ASSERT_TRUE(line) << "no access line for " << id;
  EXPECT_EQ(str(line->at("outcome")), "client_disconnected");
  EXPECT_EQ(line->at("status").as_int64(), 499);
  EXPECT_FALSE(line->at("caller_left_ms").is_null());
  std::size_t lines_for_id = 0;
  for (const auto& l : access_lines(gw)) lines_for_id += str(l.at("request_id")) == id ? 1 : 0;
  EXPECT_EQ(lines_for_id, 1u);

  // The phase, as the gateway lived it: whether the upstream's response head had arrived when
  // it saw the caller leave.
  const auto& attempts = line->at("attempts").as_array();
  const double seen_left = num(line->at("caller_left_ms"));
  switch (c.when) {
    case phase::queued:
    case phase::retry_backoff:
      break;  // below, and above
    case phase::connecting_tls:
    case phase::connecting_tcp:
    case phase::waiting_headers:
      ASSERT_EQ(attempts.size(), 1u) << boost::json::serialize(*line);
      EXPECT_TRUE(attempts[0].at("head_ms").is_null())
          << "a response head arrived: " << boost::json::serialize(*line);
      break;
    case phase::headers_no_body:
    case phase::before_first_event:
    case phase::mid_stream: {
      ASSERT_EQ(attempts.size(), 1u) << boost::json::serialize(*line);
      ASSERT_FALSE(attempts[0].at("head_ms").is_null())
          << "the gateway never read the head: " << boost::json::serialize(*line);
      if (num(attempts[0].at("head_ms")) > seen_left) {
        if (c.when == phase::mid_stream) {
          ADD_FAILURE() << "the caller had events before the gateway had the head: "
                        << boost::json::serialize(*line);
          return;
        }
        redo = true;  // read after the caller left: the gateway was still waiting for headers
        return;
      }
      if (c.when == phase::before_first_event) {
        EXPECT_EQ(entries_of(mock.stats(), id).at(0).at("chunks_sent").as_int64(), 0)
            << "an event had been sent";
      }
      break;
    }
  }

  if (c.when == phase::queued) {
    EXPECT_TRUE(entries_of(mock.stats(), id).empty()) << "the queued request reached the mock";
    // It waited, and never got a slot: no attempt happened.
    EXPECT_GT(num(line->at("queue_wait_ms")), 0.0);
    EXPECT_TRUE(line->at("attempts").as_array().empty()) << boost::json::serialize(*line);
  }
}

TEST_P(DisconnectMatrix, TheCallerLeavingEndsTheUpstreamWorkAndGivesBackTheSlot) {
  bool redo = true;
  for (int trial = 0; trial < 3 && redo && !HasFailure(); ++trial) {
    run(GetParam(), redo);
    if (redo) std::printf("[%s] phase missed in trial %d\n", case_name(GetParam()).c_str(), trial);
  }
  EXPECT_FALSE(redo) << "three trials in a row missed the phase";
}

INSTANTIATE_TEST_SUITE_P(EveryPhaseAndSurface, DisconnectMatrix, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<matrix_case>& info) {
                           return case_name(info.param);
                         });

}  // namespace
}  // namespace tether::test
