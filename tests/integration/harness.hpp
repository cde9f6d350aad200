// Shared set-up for the integration tests: a tether-mock, a gateway in front of it, and readers
// for what each side observed (the mock's /_stats, the gateway's access log).
#pragma once

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <boost/json.hpp>
#include <chrono>
#include <csignal>
#include <fstream>
#include <limits>
#include <optional>
#include <regex>
#include <string>
#include <thread>

#include "tests/support/gateway.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/mock_server.hpp"

namespace tether::test {

// Every surface: tether-mock speaks both APIs, as vLLM does (an OpenAI-API server listing
// /v1/messages too), so one upstream serves every test's requests.
inline constexpr const char* every_surface =
    R"(surfaces = ["chat", "completions", "embeddings", "responses", "messages", "count_tokens"])";

// A config with one upstream "mock" pointing at `mock` and serving every surface, the given
// [request] keys and models. `models` is TOML for [[models]] entries; `extra` is appended (more
// sections).
inline std::string gateway_config(const mock_server& mock, const std::string& request_keys,
                                  const std::string& models, const std::string& extra = "",
                                  const std::string& server_keys = "") {
  return "[server]\nlisten = \"127.0.0.1:0\"\n" + server_keys + "\n\n[request]\n" + request_keys +
         "\n\n[[upstreams]]\nname = \"mock\"\nbase_url = \"" + mock.url() + "\"\n" + every_surface +
         "\nmax_in_flight = 64\n\n" + models + "\n" + extra +
         "\n[telemetry]\nlog_format = \"json\"\n";
}

inline std::string model_entry(const std::string& name, const std::string& upstream_model,
                               const std::string& more = "") {
  return "[[models]]\nname = \"" + name + "\"\nupstream = \"mock\"\nupstream_model = \"" +
         upstream_model + "\"\n" + more + "\n";
}

inline std::string chat_body(const std::string& model, bool stream = false) {
  return R"({"model":")" + model + R"(","stream":)" + (stream ? "true" : "false") +
         R"(,"messages":[{"role":"user","content":"hello"}]})";
}

// Wall-clock milliseconds, the mock's time base (its timestamps are epoch ms).
inline double epoch_ms(std::chrono::steady_clock::time_point tp) {
  auto sys_now = std::chrono::system_clock::now();
  auto steady_now = std::chrono::steady_clock::now();
  auto at =
      sys_now + std::chrono::duration_cast<std::chrono::system_clock::duration>(tp - steady_now);
  return std::chrono::duration<double, std::milli>(at.time_since_epoch()).count();
}
inline double epoch_ms_now() {
  return epoch_ms(std::chrono::steady_clock::now());
}

// How long after the caller got its answer the upstream may still see its connection close, in
// a test whose every other way to close it (a timer, the upstream's own end) is further off than
// this: a close seen within it was the cut, not one of those. tether sends the answer and cancels
// the work at the same moment, on different actors, and the mock is another process that stamps
// the close when it gets to it, on two shared cores. Only for a test that makes load of its own
// (many answers and closes at one moment): where one request runs on an idle gateway, the test
// bounds the close tightly (lifecycle_test's quiet_close_ms). A test with a timer nearer than
// this states its own bound from that timer.
inline constexpr double close_slack_ms = TETHER_SANITIZED ? 1500.0 : 1000.0;

// The access-log line of one request (waits for it: the line is written when the request's
// last upstream connection has closed, which may be after the response).
inline std::optional<boost::json::object> access_line(
    gateway_process& gw, const std::string& request_id,
    std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  auto line = gw.process().wait_for_line(
      std::regex("\"type\":\"access\",\"request_id\":\"" + request_id + "\""), timeout);
  if (!line) return std::nullopt;
  return boost::json::parse(line->line).as_object();
}

// Waits until `gw` has written `n` access-log lines (each comes after its response, once the
// request's last upstream connection has closed); returns how many it saw within `timeout`.
inline std::size_t await_access_lines(gateway_process& gw, std::size_t n,
                                      std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  static const std::regex access{"\"type\":\"access\""};
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::size_t seen = 0;
  std::size_t from = 0;
  while (seen < n) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    auto match = gw.process().wait_for_line(access, left, from);
    if (!match) break;
    ++seen;
    from = match->line_index + 1;
  }
  return seen;
}

inline std::vector<boost::json::object> access_lines(gateway_process& gw) {
  std::vector<boost::json::object> out;
  for (const auto& l : gw.process().lines()) {
    if (l.find("\"type\":\"access\"") == std::string::npos) continue;
    out.push_back(boost::json::parse(l).as_object());
  }
  return out;
}

inline std::vector<boost::json::object> mock_log(const boost::json::object& stats) {
  std::vector<boost::json::object> out;
  for (const auto& e : stats.at("log").as_array()) out.push_back(e.as_object());
  return out;
}

// The mock's records of the request tether sent with this X-Request-Id (one per attempt).
inline std::vector<boost::json::object> entries_of(const boost::json::object& stats,
                                                   const std::string& request_id) {
  std::vector<boost::json::object> out;
  for (const auto& e : mock_log(stats)) {
    const auto* id = e.at("headers").as_object().if_contains("x-request-id");
    if (id && id->as_string() == request_id) out.push_back(e);
  }
  return out;
}

// One series of the gateway's /metrics, e.g. `tether_queue_depth` or
// `tether_upstream_work_in_flight{upstream="mock"}`, as the text has it; nullopt when it has no
// such line. A labelled counter is rendered only once it counted: such a series of a counter the
// text declares (`# TYPE <name> counter`) is 0, as Prometheus reads it.
inline std::optional<double> metric_if_present(std::uint16_t port, const std::string& series) {
  // Appended, not `"\n" + body`: GCC 12 at -O3 warns falsely (-Wrestrict) on a literal prepended
  // to a temporary string.
  std::string body = "\n";
  body += request("GET", port, "/metrics").body;
  auto at = body.find("\n" + series + " ");
  if (at != std::string::npos) return std::stod(body.substr(at + series.size() + 2));
  const auto name = series.substr(0, series.find('{'));
  if (name != series && body.find("\n# TYPE " + name + " counter\n") != std::string::npos)
    return 0.0;
  return std::nullopt;
}

// The value of one series; a series /metrics does not have fails the test and reads NaN, which
// no comparison accepts: a renamed or misspelt series must not read as a number that passes.
inline double metric(std::uint16_t port, const std::string& series) {
  if (auto v = metric_if_present(port, series)) return *v;
  ADD_FAILURE() << "/metrics has no series " << series;
  return std::numeric_limits<double>::quiet_NaN();
}

// Polls the series until it equals `value` (bounded); true if it did. For gauges that settle
// when the work ends, which is after the response by design. A series still missing at the end
// fails the test as metric() does.
inline bool await_metric(std::uint16_t port, const std::string& series, double value,
                         std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto v = metric_if_present(port, series);
    if (v == value) return true;
    if (std::chrono::steady_clock::now() > until) {
      if (!v) ADD_FAILURE() << "/metrics has no series " << series;
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// The budget slots the drain's closing report ("drained: N request(s) cancelled ..., M budget
// slot(s) left") says were still held; nullopt if the report did not come within `timeout`. The
// number is read whole: a pattern on "0 budget slot" alone also matched "10 budget slot".
inline std::optional<long> drained_slots_left(gateway_process& gw,
                                              std::chrono::milliseconds timeout) {
  static const std::regex report{
      "drained: [0-9]+ request\\(s\\) cancelled at the drain timeout, "
      "([0-9]+) budget slot\\(s\\) left"};
  auto line = gw.process().wait_for_line(report, timeout);
  if (!line) return std::nullopt;
  return std::stol(line->groups.at(1));
}

// Lower-case hex SHA-256, as [[keys]] sha256 takes it. Computed here, not with the gateway's own
// helper: the test must not trust the code under test.
inline std::string sha256_hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr);
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(hex[digest[i] >> 4]);
    out.push_back(hex[digest[i] & 0xf]);
  }
  return out;
}

inline std::string str(const boost::json::value& v) {
  return std::string(v.as_string());
}
inline double num(const boost::json::value& v) {
  return v.to_number<double>();
}

// Rewrites the gateway's config file, sends SIGHUP, and returns the line that says what came of
// it ("config reloaded ..." or the last "config reload refused ..."); nullopt if none came.
inline std::optional<std::string> reload(gateway_process& gw, const std::string& toml) {
  {
    std::ofstream out(gw.config_path(), std::ios::trunc);
    out << toml;
  }
  const auto from = gw.process().lines().size();
  gw.process().send_signal(SIGHUP);
  auto line = gw.process().wait_for_line(
      std::regex("config reloaded from|config reload refused: the running config stays"),
      std::chrono::seconds(5), from);
  if (!line) return std::nullopt;
  return line->line;
}

}  // namespace tether::test
