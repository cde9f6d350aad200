#include "actors/policy/usage.hpp"

#include <gtest/gtest.h>

namespace tether {
namespace {

TEST(UsageTest, TheOpenAIAndAnthropicShapesAreRead) {
  auto chat = usage_of(
      R"({"id":"c","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}})");
  EXPECT_EQ(chat, (token_usage{12, 5}));
  auto responses =
      usage_of(R"({"id":"r","usage":{"input_tokens":7,"output_tokens":3,"total_tokens":10}})");
  EXPECT_EQ(responses, (token_usage{7, 3}));
  auto messages = usage_of(
      R"({"type":"message","usage":{"input_tokens":7,"cache_read_input_tokens":100,"cache_creation_input_tokens":20,"output_tokens":3}})");
  EXPECT_EQ(messages, (token_usage{127, 3}));
  auto embeddings = usage_of(R"({"data":[],"usage":{"prompt_tokens":4,"total_tokens":4}})");
  EXPECT_EQ(embeddings, (token_usage{4, std::nullopt}));
}

TEST(UsageTest, StreamEventsAreReadAndMerged) {
  token_usage u;
  const auto start = usage_of(
      "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\","
      "\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n");
  ASSERT_TRUE(start);
  merge_usage(u, *start);
  const auto delta = usage_of(
      "event: message_delta\ndata: "
      "{\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n");
  ASSERT_TRUE(delta);
  merge_usage(u, *delta);
  EXPECT_EQ(u, (token_usage{25, 15}));
  // An OpenAI chunk before the last one says "usage":null.
  EXPECT_FALSE(usage_of("data: {\"choices\":[{\"delta\":{}}],\"usage\":null}\n\n"));
}

TEST(UsageTest, TextThatOnlyMentionsUsageIsNotUsage) {
  EXPECT_FALSE(usage_of(R"({"content":"the \"usage\": {\"prompt_tokens\": 9} is"})"));
  EXPECT_FALSE(usage_of(R"({"usage":"none"})"));
  EXPECT_FALSE(usage_of(R"({"usage":{"prompt_tokens":-1,"completion_tokens":"2"}})"));
  EXPECT_FALSE(usage_of(R"({"usage":{"prompt_tokens":3)"));  // cut off
  EXPECT_FALSE(usage_of(""));
  // The last usage member counts; one inside a string before it does not hide it.
  EXPECT_EQ(usage_of(R"({"a":"\"usage\":{}","usage" : {"prompt_tokens":1,"completion_tokens":2}})"),
            (token_usage{1, 2}));
}

}  // namespace
}  // namespace tether
