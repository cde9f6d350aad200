#include "actors/policy/wire/surface.hpp"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace tether {
namespace {

TEST(SurfaceTest, EachModelPathIsItsSurfaceAndNothingElseIsOne) {
  EXPECT_EQ(surface_of("/v1/chat/completions"), surface::chat);
  EXPECT_EQ(surface_of("/v1/completions"), surface::completions);
  EXPECT_EQ(surface_of("/v1/embeddings"), surface::embeddings);
  EXPECT_EQ(surface_of("/v1/responses"), surface::responses);
  EXPECT_EQ(surface_of("/v1/responses/resp_1"), std::nullopt);
  EXPECT_EQ(surface_of("/v1/models"), std::nullopt);
  EXPECT_EQ(surface_of("/v1/Responses"), std::nullopt);
  EXPECT_FALSE(can_stream(surface::embeddings));
  EXPECT_TRUE(can_stream(surface::responses));
}

TEST(SurfaceTest, ChatStreamsEndWithTheOpenAiErrorObjectAndNoEventName) {
  auto e = stream_error_of(surface::chat, "timeout_error", "the deadline passed", "req-1");
  EXPECT_TRUE(e.event.empty());
  auto v = boost::json::parse(e.data).as_object();
  const auto& err = v.at("error").as_object();
  EXPECT_EQ(err.at("code").as_string(), "stream_interrupted");
  EXPECT_EQ(err.at("type").as_string(), "timeout_error");
  EXPECT_EQ(err.at("message").as_string(), "the deadline passed");
  EXPECT_EQ(err.at("request_id").as_string(), "req-1");
}

TEST(SurfaceTest, ResponsesStreamsEndWithTheResponsesApisErrorEvent) {
  auto e =
      stream_error_of(surface::responses, "upstream_error", "the \"upstream\" broke\n", "req-2");
  EXPECT_EQ(e.event, "error");
  auto v = boost::json::parse(e.data).as_object();
  EXPECT_EQ(v.at("type").as_string(), "error");
  EXPECT_EQ(v.at("code").as_string(), "stream_interrupted");
  EXPECT_EQ(v.at("message").as_string(), "the \"upstream\" broke\n");
  EXPECT_TRUE(v.at("param").is_null());
  EXPECT_EQ(v.at("request_id").as_string(), "req-2");
  EXPECT_EQ(e.data.find('\n'), std::string::npos);  // one data line
}

TEST(SurfaceTest, ResponsesStreamsEndWithResponseFailedAfterTheErrorEvent) {
  auto e = responses_failed_of("resp_7", 1765000000, "gpt-\"x\"", 12,
                               "stream interrupted: the deadline passed\n");
  EXPECT_EQ(e.event, "response.failed");
  EXPECT_EQ(e.data.find('\n'), std::string::npos);  // one data line
  auto v = boost::json::parse(e.data).as_object();
  EXPECT_EQ(v.at("type").as_string(), "response.failed");
  EXPECT_EQ(v.at("sequence_number").as_int64(), 12);
  const auto& r = v.at("response").as_object();
  EXPECT_EQ(r.at("id").as_string(), "resp_7");
  EXPECT_EQ(r.at("object").as_string(), "response");
  EXPECT_EQ(r.at("created_at").as_int64(), 1765000000);
  EXPECT_EQ(r.at("status").as_string(), "failed");
  EXPECT_EQ(r.at("model").as_string(), "gpt-\"x\"");
  EXPECT_TRUE(r.at("output").as_array().empty());
  EXPECT_TRUE(r.at("incomplete_details").is_null());
  const auto& err = r.at("error").as_object();
  EXPECT_EQ(err.at("code").as_string(), "stream_interrupted");
  EXPECT_EQ(err.at("message").as_string(), "stream interrupted: the deadline passed\n");
}

}  // namespace
}  // namespace tether
