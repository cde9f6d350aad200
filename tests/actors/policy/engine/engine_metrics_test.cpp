// Unit tests for read_engine_counts and series_of: each engine's running and queued requests
// read from its own Prometheus text, summed over label sets, and nothing a hostile text holds
// read as a count.
#include "actors/policy/engine/engine_metrics.hpp"

#include <gtest/gtest.h>

#include <string>

namespace tether {
namespace {

config::upstream_config engine(config::engine_kind kind) {
  config::upstream_config u;
  u.engine = kind;
  return u;
}

std::optional<engine_counts> read_as(config::engine_kind kind, std::string_view text) {
  return read_engine_counts(text, series_of(engine(kind)));
}

TEST(EngineMetricsTest, LlamaCppsOwnTextReadsItsProcessingAndDeferredRequests) {
  // As llama-server --metrics writes it.
  const std::string text =
      "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n"
      "# TYPE llamacpp:prompt_tokens_total counter\n"
      "llamacpp:prompt_tokens_total 120\n"
      "# HELP llamacpp:requests_processing Number of requests processing.\n"
      "# TYPE llamacpp:requests_processing gauge\n"
      "llamacpp:requests_processing 2\n"
      "# HELP llamacpp:requests_deferred Number of requests deferred.\n"
      "# TYPE llamacpp:requests_deferred gauge\n"
      "llamacpp:requests_deferred 3\n";
  auto c = read_as(config::engine_kind::llamacpp, text);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->running, 2);
  EXPECT_EQ(c->queued, 3);
}

TEST(EngineMetricsTest, VllmsSeriesAreSummedOverTheirLabelSets) {
  const std::string text =
      "vllm:num_requests_running{engine=\"0\",model_name=\"a\"} 2.0\n"
      "vllm:num_requests_running{engine=\"0\",model_name=\"b\"} 1.0\n"
      "vllm:num_requests_waiting{engine=\"0\",model_name=\"a\"} 4.0\n"
      "vllm:num_requests_waiting{engine=\"0\",model_name=\"b\"} 0.0\n"
      "vllm:num_requests_running_total{model_name=\"a\"} 99\n";  // another series
  auto c = read_as(config::engine_kind::vllm, text);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->running, 3);
  EXPECT_EQ(c->queued, 4);
}

TEST(EngineMetricsTest, SglangsSeriesAreRead) {
  auto c = read_as(config::engine_kind::sglang,
                   "sglang:num_running_reqs{model_name=\"m\"} 5\n"
                   "sglang:num_queue_reqs{model_name=\"m\"} 7 1712345678000\n");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->running, 5);
  EXPECT_EQ(c->queued, 7);
}

TEST(EngineMetricsTest, TheUpstreamsOverridesReplaceTheEnginesNames) {
  auto u = engine(config::engine_kind::vllm);
  u.metrics_running_series = "my:busy";
  const auto s = series_of(u);
  EXPECT_EQ(s.running, "my:busy");
  EXPECT_EQ(s.queued, "vllm:num_requests_waiting");
  auto c = read_engine_counts("vllm:num_requests_running 9\nmy:busy 1\n", s);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->running, 1);
  EXPECT_EQ(c->queued, 0) << "a queued series that is absent reads 0";
  // engine = "openai" names nothing: without an override there is nothing to read.
  EXPECT_EQ(series_of(engine(config::engine_kind::openai)).running, "");
  EXPECT_FALSE(read_as(config::engine_kind::openai, "my:busy 1\n").has_value());
}

TEST(EngineMetricsTest, WithoutTheRunningSeriesTheTextSaysNothing) {
  EXPECT_FALSE(read_as(config::engine_kind::llamacpp, "").has_value());
  EXPECT_FALSE(read_as(config::engine_kind::llamacpp, "llamacpp:requests_deferred 3\n"));
  EXPECT_FALSE(read_as(config::engine_kind::llamacpp, "<html>Not Found</html>"));
  // Only a sample counts, not a name in a comment or a prefix of another name.
  EXPECT_FALSE(read_as(config::engine_kind::llamacpp,
                       "# TYPE llamacpp:requests_processing gauge\n"
                       "llamacpp:requests_processing_total 4\n"));
}

TEST(EngineMetricsTest, LabelValuesMayHoldBracesQuotesAndSpaces) {
  auto c = read_as(config::engine_kind::vllm,
                   "vllm:num_requests_running{model_name=\"a} \\\"b\\\" {c\"} 2\n"
                   "vllm:num_requests_running{model_name=\"x\\\\\"} 1\n");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->running, 3);
}

TEST(EngineMetricsTest, SamplesThatAreNotCountsAreIgnored) {
  auto c = read_as(config::engine_kind::llamacpp,
                   "llamacpp:requests_processing NaN\n"
                   "llamacpp:requests_processing +Inf\n"
                   "llamacpp:requests_processing -2\n"
                   "llamacpp:requests_processing 1x\n"
                   "llamacpp:requests_processing\n"
                   "llamacpp:requests_processing{unclosed=\"1\" 5\n"
                   "llamacpp:requests_processing +1\r\n"
                   "  llamacpp:requests_processing\t1e0\n"
                   "llamacpp:requests_deferred 1e300\n");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->running, 2);
  EXPECT_EQ(c->queued, max_engine_requests) << "a sum is capped";
}

TEST(EngineMetricsTest, AHugeSumIsCappedAndAnOverlongTextIsNotRead) {
  std::string many;
  for (int i = 0; i < 1000; ++i) many += "llamacpp:requests_processing 1e300\n";
  auto c = read_as(config::engine_kind::llamacpp, many);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->running, max_engine_requests);
  std::string huge(max_engine_metrics_bytes, '#');
  huge += "\nllamacpp:requests_processing 1\n";
  EXPECT_FALSE(read_as(config::engine_kind::llamacpp, huge).has_value());
}

TEST(EngineMetricsTest, ArbitraryBytesNeverReadAsACountUnlessASampleSaysSo) {
  // Every byte value, in lines and out of them: nothing but the one well-formed sample counts.
  std::string noise;
  for (int b = 0; b < 256; ++b) noise.push_back(static_cast<char>(b));
  const std::string text = noise + "\n" + noise + "llamacpp:requests_processing 4\n" + noise +
                           "\nllamacpp:requests_processing 2\n{\"\\" + noise;
  auto c = read_as(config::engine_kind::llamacpp, text);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->running, 2);
}

}  // namespace
}  // namespace tether
