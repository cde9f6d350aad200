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

}  // namespace
}  // namespace tether
