#include "actors/policy/wire/output_event.hpp"

#include <gtest/gtest.h>

namespace tether {
namespace {

TEST(OutputEventTest, AChatChunkCarriesOutputWhenItsContentOrArgumentsAreNotEmpty) {
  EXPECT_TRUE(carries_output(surface::chat, R"(data: {"choices":[{"delta":{"content":"Hi"}}]})"));
  EXPECT_TRUE(carries_output(surface::chat, R"(data: {"choices":[{"delta": {"content": "Hi"}}]})"));
  EXPECT_TRUE(carries_output(
      surface::chat,
      R"(data: {"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"{\"a"}}]}}]})"));
  // The role chunk, the finish chunk, the usage chunk and [DONE] carry none.
  EXPECT_FALSE(carries_output(
      surface::chat, R"(data: {"choices":[{"delta":{"role":"assistant","content":""}}]})"));
  EXPECT_FALSE(carries_output(
      surface::chat, R"(data: {"choices":[{"delta":{"role":"assistant","content":null}}]})"));
  EXPECT_FALSE(
      carries_output(surface::chat, R"(data: {"choices":[{"delta":{},"finish_reason":"stop"}]})"));
  EXPECT_FALSE(carries_output(surface::chat, R"(data: {"choices":[],"usage":{"total_tokens":3}})"));
  EXPECT_FALSE(carries_output(surface::chat, "data: [DONE]"));
}

TEST(OutputEventTest, CompletionsCountTextResponsesAndMessagesCountTheirDeltaEvents) {
  EXPECT_TRUE(carries_output(surface::completions, R"(data: {"choices":[{"text":"a"}]})"));
  EXPECT_FALSE(carries_output(surface::completions, R"(data: {"choices":[{"text":""}]})"));
  EXPECT_TRUE(carries_output(surface::responses,
                             "event: response.output_text.delta\ndata: {\"delta\":\"a\"}"));
  EXPECT_FALSE(carries_output(surface::responses,
                              "event: response.output_text.done\ndata: {\"text\":\"abc\"}"));
  EXPECT_TRUE(carries_output(
      surface::messages, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\"}"));
  EXPECT_FALSE(carries_output(surface::messages, "event: message_stop\ndata: {}"));
  EXPECT_FALSE(carries_output(surface::embeddings, R"(data: {"content":"x"})"));
}

TEST(OutputEventTest, TheUsageChunkIsTheOneWithNoChoicesAndAUsage) {
  EXPECT_TRUE(is_usage_chunk(
      R"(data: {"id":"x","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}})"));
  EXPECT_FALSE(is_usage_chunk(R"(data: {"choices":[{"delta":{"content":"usage"}}]})"));
  EXPECT_FALSE(is_usage_chunk(R"(data: {"choices":[{"delta":{}}],"usage":{"prompt_tokens":3}})"));
  EXPECT_FALSE(is_usage_chunk("data: [DONE]"));
}

}  // namespace
}  // namespace tether
