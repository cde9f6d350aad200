// /metrics is Prometheus text that a strict reader accepts, and its counters move by exactly one
// per request, labelled with the request's outcome (issue #5).
#include <gtest/gtest.h>

#include <future>
#include <map>
#include <set>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

struct sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct exposition {
  std::map<std::string, std::string> types;  // family → counter|gauge|histogram
  std::set<std::string> helped;
  std::vector<sample> samples;
};

// A strict reader of the text format (version 0.0.4): every line is a comment (# HELP / # TYPE)
// or `name{label="value",...} number`; each family is declared once, TYPE before its samples;
// label values are escaped; histogram series are cumulative and end with le="+Inf" == _count.
exposition parse_prometheus(const std::string& text) {
  exposition e;
  std::istringstream in(text);
  std::string line;
  static const std::regex help(R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+$)");
  static const std::regex type(R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram)$)");
  static const std::regex series(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (-?[0-9.eE+-]+|\+Inf|NaN)$)");
  static const std::regex label(R"re(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$))re");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, help)) {
      EXPECT_TRUE(e.helped.insert(m[1]).second) << "HELP twice: " << line;
    } else if (std::regex_match(line, m, type)) {
      EXPECT_TRUE(e.types.emplace(m[1], m[2]).second) << "TYPE twice: " << line;
    } else if (std::regex_match(line, m, series)) {
      sample s;
      s.name = m[1];
      s.value = std::stod(m[4]);
      std::string labels = m[3];
      std::size_t consumed = 0;
      for (std::sregex_iterator it(labels.begin(), labels.end(), label), end; it != end; ++it) {
        EXPECT_EQ(static_cast<std::size_t>(it->position()), consumed) << "bad labels: " << line;
        consumed = it->position() + it->length();
        s.labels[(*it)[1]] = (*it)[2];
      }
      EXPECT_EQ(consumed, labels.size()) << "bad labels: " << line;
      auto family = s.name;
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        auto n = std::string(suffix).size();
        if (!e.types.count(family) && family.size() > n &&
            family.compare(family.size() - n, n, suffix) == 0) {
          family = family.substr(0, family.size() - n);
        }
      }
      EXPECT_TRUE(e.types.count(family)) << "sample before its TYPE: " << line;
      e.samples.push_back(std::move(s));
    } else {
      ADD_FAILURE() << "not a Prometheus line: '" << line << "'";
    }
  }
  return e;
}

double value_of(const exposition& e, const std::string& name,
                const std::map<std::string, std::string>& labels = {}) {
  for (const auto& s : e.samples) {
    if (s.name == name && s.labels == labels) return s.value;
  }
  return 0;  // an absent counter series has not counted yet
}

TEST(MetricsTest, ExpositionIsStrictPrometheusTextWithEveryContractMetric) {
  mock_server mock;
  gateway_process gw{gateway_config(mock, "", model_entry("chat", "mock"))};
  ASSERT_EQ(request("POST", gw.port(), "/v1/chat/completions", chat_body("chat"),
                    {{"x-request-id", "counted"}})
                .status,
            200);
  // The request is counted when its tree is gone (its upstream connection closed), which can be
  // a moment after the answer; its access line is written after it is counted.
  ASSERT_TRUE(access_line(gw, "counted"));
  auto r = request("GET", gw.port(), "/metrics");
  ASSERT_EQ(r.status, 200);
  ASSERT_NE(r.header("content-type"), nullptr);
  EXPECT_NE(r.header("content-type")->find("text/plain"), std::string::npos);
  auto e = parse_prometheus(r.body);
  std::map<std::string, std::string> expected{
      {"tether_requests_total", "counter"},
      {"tether_request_duration_seconds", "histogram"},
      {"tether_queue_wait_seconds", "histogram"},
      {"tether_upstream_attempts_total", "counter"},
      {"tether_requests_in_flight", "gauge"},
      {"tether_upstream_work_in_flight", "gauge"},
      {"tether_queue_depth", "gauge"},
      {"tether_late_work_seconds_total", "counter"},
      {"tether_cancel_latency_seconds", "histogram"},
      {"tether_tokens_total", "counter"},
      {"tether_spend_usd_total", "counter"},
      {"tether_key_budget", "gauge"},
      {"tether_key_usage", "gauge"},
  };
  for (const auto& [name, type] : expected) {
    ASSERT_TRUE(e.types.count(name)) << name;
    EXPECT_EQ(e.types.at(name), type) << name;
    EXPECT_TRUE(e.helped.count(name)) << name;
  }
  // Histograms: cumulative buckets from 1 ms to 10 min, +Inf equal to _count.
  std::vector<double> buckets;
  double previous = 0;
  for (const auto& s : e.samples) {
    if (s.name != "tether_request_duration_seconds_bucket") continue;
    EXPECT_GE(s.value, previous);
    previous = s.value;
    if (s.labels.at("le") != "+Inf") buckets.push_back(std::stod(s.labels.at("le")));
  }
  ASSERT_FALSE(buckets.empty());
  EXPECT_DOUBLE_EQ(buckets.front(), 0.001);
  EXPECT_DOUBLE_EQ(buckets.back(), 600);
  EXPECT_EQ(previous, value_of(e, "tether_request_duration_seconds_count",
                               {{"model", "chat"}, {"outcome", "ok"}}));
  // The request's usage, by key ("" without keys), upstream and the model's public name: a
  // sample of each kind, and its spend (no prices: 0).
  std::set<std::string> kinds;
  bool spend = false;
  for (const auto& s : e.samples) {
    if (s.name == "tether_tokens_total") {
      auto labels = s.labels;
      kinds.insert(labels["kind"]);
      labels.erase("kind");
      EXPECT_EQ(labels, (std::map<std::string, std::string>{
                            {"key", ""}, {"upstream", "mock"}, {"model", "chat"}}));
    }
    if (s.name == "tether_spend_usd_total") {
      spend = true;
      EXPECT_EQ(s.labels, (std::map<std::string, std::string>{{"key", ""}, {"model", "chat"}}));
      EXPECT_EQ(s.value, 0);
    }
  }
  EXPECT_EQ(kinds, (std::set<std::string>{"prompt", "completion", "cached", "waste"}));
  EXPECT_TRUE(spend);
  EXPECT_GT(value_of(e, "tether_tokens_total",
                     {{"key", ""}, {"upstream", "mock"}, {"model", "chat"}, {"kind", "prompt"}}),
            0);
}

TEST(MetricsTest, EachLocallyProducibleOutcomeCountsExactlyOnce) {
  mock_server mock;
  std::string models = model_entry("chat", "mock") + model_entry("rejecting", "mock-fail-400") +
                       model_entry("failing", "mock-fail-503") + model_entry("hang", "mock-hang") +
                       model_entry("slow", "mock-delay-1000", "attempt_timeout_ms = 5000");
  std::string cfg =
      gateway_config(mock, "deadline_ms = 5000\nattempt_timeout_ms = 150\nmax_retries = 0", models,
                     "[budget]\nqueue_max = 0\n", "max_request_bytes = 2048");
  auto at = cfg.find("max_in_flight = 64");
  cfg.replace(at, 18, "max_in_flight = 1");
  cfg +=
      "[[keys]]\nname = \"t\"\nsha256 = \"" +
      std::string("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08") +  // "test"
      "\"\nmodels = [\"*\"]\n";
  gateway_process gw{cfg};
  header_map key{{"authorization", "Bearer test"}};
  // The single slot is free again only when the previous request's upstream connection has
  // closed, which may be just after its answer; without this wait the next one is "overloaded".
  auto settle = [&] {
    EXPECT_TRUE(await_metric(gw.port(), "tether_upstream_work_in_flight{upstream=\"mock\"}", 0));
  };
  auto post = [&](const std::string& body, header_map h) {
    settle();
    return request("POST", gw.port(), "/v1/chat/completions", body, h, 10s);
  };
  EXPECT_EQ(post(chat_body("chat"), key).status, 200);
  EXPECT_EQ(post(chat_body("rejecting"), key).status, 400);
  EXPECT_EQ(post(chat_body("failing"), key).status, 502);
  EXPECT_EQ(post(chat_body("hang"), key).status, 504);  // attempt timeout: upstream_timeout
  header_map short_budget = key;
  short_budget.push_back({"x-request-deadline-ms", "100"});
  EXPECT_EQ(post(chat_body("hang"), short_budget).status, 504);  // deadline_exceeded
  {
    stream_options opts;
    opts.close_after = 100ms;
    settle();
    stream_request("POST", gw.port(), "/v1/chat/completions", chat_body("hang"),
                   {{"authorization", "Bearer test"}, {"x-request-id", "gone"}}, opts);
    ASSERT_TRUE(access_line(gw, "gone"));
  }
  {
    // The only slot is busy and the queue holds nobody: overloaded.
    auto busy = std::async(std::launch::async, [&] { return post(chat_body("slow"), key); });
    mock.wait_for_stats([](const auto& s) { return s.at("active").as_int64() == 1; });
    EXPECT_EQ(
        request("POST", gw.port(), "/v1/chat/completions", chat_body("chat"), key, 10s).status,
        503);
    EXPECT_EQ(busy.get().status, 200);
  }
  EXPECT_EQ(post("{not json", key).status, 400);
  EXPECT_EQ(post(chat_body("nope"), key).status, 404);
  EXPECT_EQ(post(chat_body("chat"), {}).status, 401);
  EXPECT_EQ(post(std::string(4096, ' ') + chat_body("chat"), key).status, 413);

  // Every line is written; then the counters say the same.
  await_access_lines(gw, 12);
  auto e = parse_prometheus(request("GET", gw.port(), "/metrics").body);
  auto count = [&](const std::string& model, const std::string& outcome) {
    return value_of(e, "tether_requests_total", {{"model", model}, {"outcome", outcome}});
  };
  EXPECT_EQ(count("chat", "ok"), 1);
  EXPECT_EQ(count("slow", "ok"), 1);
  EXPECT_EQ(count("rejecting", "upstream_rejected"), 1);
  EXPECT_EQ(count("failing", "upstream_failed"), 1);
  EXPECT_EQ(count("hang", "upstream_timeout"), 1);
  EXPECT_EQ(count("hang", "deadline_exceeded"), 1);
  EXPECT_EQ(count("hang", "client_disconnected"), 1);
  EXPECT_EQ(count("chat", "overloaded"), 1);
  EXPECT_EQ(count("", "bad_request"), 1);
  EXPECT_EQ(count("", "unknown_model"), 1);
  EXPECT_EQ(count("", "unauthorized"), 1);
  EXPECT_EQ(count("", "payload_too_large"), 1);
  double total = 0;
  for (const auto& s : e.samples) {
    if (s.name == "tether_requests_total") total += s.value;
  }
  EXPECT_EQ(total, 12);  // one per model request, nothing else
  EXPECT_EQ(value_of(e, "tether_requests_in_flight"), 0);
  EXPECT_EQ(
      value_of(e, "tether_upstream_attempts_total", {{"upstream", "mock"}, {"outcome", "ok"}}), 2);
}

}  // namespace
}  // namespace tether::test
