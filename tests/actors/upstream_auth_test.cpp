#include "actors/upstream_auth.hpp"

#include <gtest/gtest.h>

namespace tether {
namespace {

std::string header(const net::header_list& h, std::string_view name) {
  const auto* v = net::find_header(h, name);
  return v == nullptr ? "<absent>" : *v;
}

TEST(UpstreamAuthTest, OpenAiUpstreamGetsABearerKeyAndNoAnthropicHeaders) {
  config::upstream_config up;
  up.api_key = "sk-upstream";
  net::header_list h;
  add_upstream_auth(h, up);
  EXPECT_EQ(header(h, "authorization"), "Bearer sk-upstream");
  EXPECT_EQ(header(h, "x-api-key"), "<absent>");
  EXPECT_EQ(header(h, "anthropic-version"), "<absent>");
  EXPECT_EQ(h.size(), 1U);
}

TEST(UpstreamAuthTest, AnthropicUpstreamGetsXApiKeyAndADefaultVersion) {
  config::upstream_config up;
  up.api = config::upstream_api::anthropic;
  up.api_key = "sk-ant";
  net::header_list h;
  add_upstream_auth(h, up);
  EXPECT_EQ(header(h, "x-api-key"), "sk-ant");
  EXPECT_EQ(header(h, "authorization"), "<absent>");
  EXPECT_EQ(header(h, "anthropic-version"), "2023-06-01");
  EXPECT_EQ(header(h, "anthropic-beta"), "<absent>");
}

TEST(UpstreamAuthTest, TheCallersVersionAndBetaArePassedOn) {
  config::upstream_config up;
  up.api = config::upstream_api::anthropic;
  net::header_list h;
  add_upstream_auth(h, up, "2024-01-01", "tools-2024-04-04");
  EXPECT_EQ(header(h, "x-api-key"), "<absent>");  // no key configured: none sent
  EXPECT_EQ(header(h, "anthropic-version"), "2024-01-01");
  EXPECT_EQ(header(h, "anthropic-beta"), "tools-2024-04-04");
  EXPECT_EQ(h.size(), 2U);

  // An OpenAI-API server serving /v1/messages (vLLM) sees what the caller sent, nothing invented.
  config::upstream_config vllm;
  vllm.api_key = "k";
  net::header_list v;
  add_upstream_auth(v, vllm, "2023-06-01", "");
  EXPECT_EQ(header(v, "authorization"), "Bearer k");
  EXPECT_EQ(header(v, "anthropic-version"), "2023-06-01");
  EXPECT_EQ(header(v, "anthropic-beta"), "<absent>");
}

}  // namespace
}  // namespace tether
