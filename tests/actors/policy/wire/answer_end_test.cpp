#include "actors/policy/wire/answer_end.hpp"

#include <gtest/gtest.h>

namespace tether {
namespace {

TEST(AnswerEndTest, ChatAndCompletionsEndAtDone) {
  for (auto s : {surface::chat, surface::completions}) {
    EXPECT_TRUE(ends_answer(s, "data: [DONE]\n\n"));
    EXPECT_TRUE(ends_answer(s, "data:[DONE]\r\n\r\n"));
    EXPECT_TRUE(ends_answer(s, ": keep-alive\ndata: [DONE]\n\n"));
    EXPECT_FALSE(ends_answer(s, R"(data: {"choices":[{"delta":{"content":"[DONE]"}}]})"
                                "\n\n"));
    EXPECT_FALSE(ends_answer(s, "data: [DONE] \n\n")) << "not the exact sentinel";
    EXPECT_FALSE(ends_answer(s, "data: [DONE]\ndata: more\n\n")) << "two data lines join";
    EXPECT_FALSE(ends_answer(s, ": [DONE]\n\n")) << "a comment";
    EXPECT_FALSE(ends_answer(s, "event: done\n\n"));
  }
}

TEST(AnswerEndTest, ResponsesEndAtTheirTerminalEvents) {
  for (auto name : {"response.completed", "response.incomplete", "response.failed"}) {
    const std::string named =
        std::string("event: ") + name + "\ndata: {\"type\":\"" + name + "\",\"response\":{}}\n\n";
    EXPECT_TRUE(ends_answer(surface::responses, named)) << named;
    const std::string unnamed = std::string("data: {\"type\":\"") + name + "\"}\n\n";
    EXPECT_TRUE(ends_answer(surface::responses, unnamed)) << unnamed;
  }
  EXPECT_FALSE(ends_answer(surface::responses,
                           "event: response.output_text.delta\ndata: {\"type\":\"response.output_"
                           "text.delta\",\"delta\":\"response.completed\"}\n\n"));
  EXPECT_FALSE(
      ends_answer(surface::responses,
                  R"(data: {"type":"response.output_text.delta","delta":"response.completed"})"
                  "\n\n"))
      << "named in the text, not the type";
  EXPECT_FALSE(ends_answer(surface::responses, "data: {\"type\":\"response.completed\"\n\n"))
      << "not JSON";
  EXPECT_FALSE(ends_answer(surface::responses, "data: [DONE]\n\n"));
}

TEST(AnswerEndTest, MessagesEndAtMessageStop) {
  EXPECT_TRUE(
      ends_answer(surface::messages, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
  EXPECT_TRUE(ends_answer(surface::messages, "data: {\"type\":\"message_stop\"}\n\n"));
  EXPECT_FALSE(ends_answer(surface::messages,
                           "event: message_delta\ndata: {\"type\":\"message_delta\"}\n\n"));
  EXPECT_FALSE(ends_answer(surface::messages,
                           "event: content_block_delta\ndata: {\"type\":\"content_block_delta\","
                           "\"delta\":{\"type\":\"message_stop\"}}\n\n"))
      << "a nested type is not the event's";
  EXPECT_FALSE(ends_answer(surface::messages, "data: [DONE]\n\n"));
}

// SSE joins an event's data lines with '\n': JSON split over lines is one document.
TEST(AnswerEndTest, DataOverSeveralLinesIsJoined) {
  EXPECT_TRUE(
      ends_answer(surface::responses, "data: {\"type\":\ndata: \"response.completed\"}\n\n"));
  EXPECT_TRUE(
      ends_answer(surface::messages, "data: {\ndata: \"type\": \"message_stop\"\ndata: }\n\n"));
  EXPECT_FALSE(ends_answer(surface::chat, "data: [DO\ndata: NE]\n\n"));
}

TEST(AnswerEndTest, SurfacesWithoutStreamsNeverEnd) {
  EXPECT_FALSE(ends_answer(surface::embeddings, "data: [DONE]\n\n"));
  EXPECT_FALSE(ends_answer(surface::count_tokens, "data: [DONE]\n\n"));
}

}  // namespace
}  // namespace tether
