#include "actors/policy/wire/affinity_key.hpp"

#include <gtest/gtest.h>

#include <string>

namespace tether {
namespace {

constexpr std::uint32_t whole = 65536;

std::string rec(std::string_view role, std::string_view text) {
  return std::string(role) + '\x1f' + std::string(text) + '\x1e';
}

TEST(AffinityKeyTest, ChatRecordsEachMessagesRoleAndTextInOrder) {
  const std::string body =
      R"({"model":"m","messages":[{"role":"system","content":"be brief"},)"
      R"({"content":[{"type":"text","text":"hel"},{"type":"image_url","image_url":{"url":"x"}},)"
      R"({"type":"text","text":"lo"}],"role":"user"}],"temperature":0})";
  EXPECT_EQ(canonical_prefix(surface::chat, body, whole),
            rec("system", "be brief") + rec("user", "hello"));
}

// The same conversation on chat, responses and messages: the same prefix, the same key.
TEST(AffinityKeyTest, TheSameConversationOnEverySurfaceHasTheSameKey) {
  const std::string chat =
      R"({"model":"m","messages":[{"role":"system","content":"You are terse."},)"
      R"({"role":"user","content":"What is 2+2?"},{"role":"assistant","content":"4"},)"
      R"({"role":"user","content":"And 3+3?"}]})";
  // Instructions after the input: the canonical order puts them first all the same.
  const std::string responses =
      R"({"model":"m","input":[{"type":"message","role":"user","content":[{"type":"input_text",)"
      R"("text":"What is 2+2?"}]},{"role":"assistant","content":[{"type":"output_text",)"
      R"("text":"4"}]},{"role":"user","content":"And 3+3?"}],"instructions":"You are terse."})";
  const std::string messages =
      R"({"model":"m","max_tokens":10,"messages":[{"role":"user","content":"What is 2+2?"},)"
      R"({"role":"assistant","content":[{"type":"text","text":"4"}]},)"
      R"({"role":"user","content":"And 3+3?"}],"system":[{"type":"text","text":"You are terse."}]})";
  const auto expected = rec("system", "You are terse.") + rec("user", "What is 2+2?") +
                        rec("assistant", "4") + rec("user", "And 3+3?");
  EXPECT_EQ(canonical_prefix(surface::chat, chat, whole), expected);
  EXPECT_EQ(canonical_prefix(surface::responses, responses, whole), expected);
  EXPECT_EQ(canonical_prefix(surface::messages, messages, whole), expected);
  EXPECT_EQ(affinity_key(surface::chat, chat, nullptr, 2048),
            affinity_key(surface::responses, responses, nullptr, 2048));
  EXPECT_EQ(affinity_key(surface::chat, chat, nullptr, 2048),
            affinity_key(surface::messages, messages, nullptr, 2048));
}

TEST(AffinityKeyTest, AResponsesInputStringIsAUserRecord) {
  EXPECT_EQ(canonical_prefix(surface::responses,
                             R"({"model":"m","instructions":"sys","input":"hi"})", whole),
            rec("system", "sys") + rec("user", "hi"));
}

TEST(AffinityKeyTest, ACompletionsPromptIsAUserRecordEach) {
  EXPECT_EQ(canonical_prefix(surface::completions, R"({"model":"m","prompt":"once upon"})", whole),
            rec("user", "once upon"));
  EXPECT_EQ(canonical_prefix(surface::completions, R"({"model":"m","prompt":["a","b"]})", whole),
            rec("user", "a") + rec("user", "b"));
  // Token ids have no text: no key, the request goes by least work.
  EXPECT_EQ(affinity_key(surface::completions, R"({"model":"m","prompt":[1,2,3]})", nullptr, 64),
            std::nullopt);
}

// The prefix stops at prefix_bytes: what comes after it changes nothing, what comes before it
// changes the key. A conversation's next turn keeps its key once its prompt is that long.
TEST(AffinityKeyTest, OnlyTheFirstPrefixBytesCount) {
  const std::string system(100, 's');
  auto body = [&](std::string_view turn) {
    return R"({"model":"m","messages":[{"role":"system","content":")" + system +
           R"("},{"role":"user","content":")" + std::string(turn) + R"("}]})";
  };
  EXPECT_EQ(canonical_prefix(surface::chat, body("x"), 64), rec("system", system).substr(0, 64));
  EXPECT_EQ(affinity_key(surface::chat, body("first turn"), nullptr, 64),
            affinity_key(surface::chat, body("a later, longer turn"), nullptr, 64));
  EXPECT_NE(affinity_key(surface::chat, body("first turn"), nullptr, 256),
            affinity_key(surface::chat, body("a later, longer turn"), nullptr, 256));
}

// The read stops once the prefix is complete: of a long conversation, only its start is parsed.
TEST(AffinityKeyTest, TheParseStopsOnceThePrefixIsComplete) {
  std::string body = R"({"model":"m","messages":[)";
  for (int i = 0; i < 1000; ++i) {
    body += R"({"role":"user","content":")" + std::string(100, 'q') + R"("},)";
  }
  body += R"({"role":"user","content":"last"}]})";
  std::size_t parsed = 0;
  EXPECT_EQ(canonical_prefix(surface::chat, body, 256, &parsed).size(), 256u);
  EXPECT_GT(parsed, 0u);
  EXPECT_LT(parsed, 400u) << "of " << body.size();
  // A string longer than the prefix: its rest is not read either.
  const std::string one_long = R"({"model":"m","messages":[{"role":"user","content":")" +
                               std::string(100000, 'z') + R"("}]})";
  EXPECT_EQ(canonical_prefix(surface::chat, one_long, 256, &parsed).size(), 256u);
  EXPECT_LT(parsed, 100000u);
}

// A prompt whose tail is cut off mid-way (which the validating parse would have refused) reads
// the same as the whole one.
TEST(AffinityKeyTest, WhatFollowsThePrefixChangesNothing) {
  const std::string head = R"({"model":"m","messages":[{"role":"user","content":")" +
                           std::string(300, 'a') + R"("},{"role":"user","content":"b)";
  const std::string whole_body = head + R"("}]})";
  EXPECT_EQ(canonical_prefix(surface::chat, whole_body, 100),
            std::string(rec("user", std::string(300, 'a'))).substr(0, 100));
  // The tail after the prefix is never parsed: garbage there changes nothing.
  const std::string broken_tail = head + R"(" nonsense ]]]})";
  EXPECT_EQ(canonical_prefix(surface::chat, broken_tail, 100),
            canonical_prefix(surface::chat, whole_body, 100));
}

TEST(AffinityKeyTest, ThePromptCacheKeyWinsThenTheHeaderThenThePrefix) {
  const std::string with_key =
      R"({"model":"m","messages":[{"role":"user","content":"a"}],"prompt_cache_key":"agent-7"})";
  const std::string other_prompt =
      R"({"prompt_cache_key":"agent-7","model":"m","messages":[{"role":"user","content":"b"}]})";
  const std::string header = "agent-7";
  const std::string other_header = "agent-8";
  EXPECT_EQ(affinity_key(surface::chat, with_key, nullptr, 64),
            affinity_key(surface::chat, other_prompt, &other_header, 64));
  // The header names the same key as the body member of that value.
  const std::string plain_a = R"({"model":"m","messages":[{"role":"user","content":"a"}]})";
  const std::string plain_b = R"({"model":"m","messages":[{"role":"user","content":"b"}]})";
  EXPECT_EQ(affinity_key(surface::chat, plain_a, &header, 64),
            affinity_key(surface::chat, with_key, nullptr, 64));
  EXPECT_EQ(affinity_key(surface::chat, plain_a, &header, 64),
            affinity_key(surface::chat, plain_b, &header, 64));
  EXPECT_NE(affinity_key(surface::chat, plain_a, nullptr, 64),
            affinity_key(surface::chat, plain_b, nullptr, 64));
  EXPECT_NE(affinity_key(surface::chat, plain_a, nullptr, 64), std::nullopt);
}

TEST(AffinityKeyTest, EscapedTextIsDecoded) {
  EXPECT_EQ(canonical_prefix(surface::chat,
                             R"({"model":"m","messages":[{"role":"user","content":"a\"b\u00e9"}]})",
                             whole),
            rec("user", "a\"b\xc3\xa9"));
  // A string ending in an escaped backslash ends at the quote after it: the members after it
  // are found (the system prompt after the messages).
  EXPECT_EQ(
      canonical_prefix(surface::messages,
                       R"({"messages":[{"content":"end\\","role":"user"}],"system":"s\\"})", whole),
      rec("system", "s\\") + rec("user", "end\\"));
}

// Found by tests/fuzz/affinity_key_fuzz.cpp. A list among the messages (or among a content's or
// a system prompt's parts) right after an object is no member's value: its strings are neither
// the last message's text nor its role, however short the prefix.
TEST(AffinityKeyTest, AListAfterAnObjectIsNoMembersValue) {
  const std::string body =
      R"({"model":"m","messages":[{"role":"user","content":"a"},["stray"],)"
      R"({"role":"tool","content":[{"type":"text","text":"b"},["not text"],"c"]}],)"
      R"("system":[{"text":"s"},["not system"]]})";
  const auto all = rec("system", "s") + rec("user", "a") + rec("tool", "bc");
  EXPECT_EQ(canonical_prefix(surface::messages, body, whole), all);
  for (std::uint32_t n = 1; n < all.size(); ++n)
    EXPECT_EQ(canonical_prefix(surface::messages, body, n), all.substr(0, n)) << n;
}

// Found by tests/fuzz/affinity_key_fuzz.cpp. A body within the gateway's depth limit
// (server.max_json_depth, 128 by default) is read whole: a member nested deeper than Boost.JSON's
// own default of 32 does not end the prompt there.
TEST(AffinityKeyTest, ADeeplyNestedMemberDoesNotEndThePrompt) {
  const std::string deep = std::string(60, '[') + "1" + std::string(60, ']');
  const std::string body = R"({"model":"m","messages":[{"role":"user","content":"before","meta":)" +
                           deep + R"(},{"role":"user","content":"after"}]})";
  EXPECT_EQ(canonical_prefix(surface::chat, body, whole),
            rec("user", "before") + rec("user", "after"));
}

// Found by tests/fuzz/affinity_key_fuzz.cpp. Text is a message's `content` or the `text` of its
// content list's parts, never a `text` in a message's other lists; and a prompt that is not a
// list (an object) has no messages or system blocks at all.
TEST(AffinityKeyTest, OnlyTheContentListsPartsAreText) {
  EXPECT_EQ(
      canonical_prefix(
          surface::responses,
          R"({"input":[{"role":"assistant","contnt":[{"text":"not text"}],"x":["nor this"]}]})",
          whole),
      rec("assistant", ""));
  EXPECT_EQ(canonical_prefix(surface::messages,
                             R"({"system":{"a":{"text":"not a block"}},)"
                             R"("messages":{"m":{"role":"user","content":"not a message"}}})",
                             whole),
            "");
}

// The prompt is read as it comes, so a member repeated inside a message counts each value.
TEST(AffinityKeyTest, AMemberRepeatedInsideAMessageCountsEachValue) {
  EXPECT_EQ(canonical_prefix(surface::chat,
                             R"({"messages":[{"role":"a","content":"x","role":"b",)"
                             R"("content":[{"text":"y","text":"z"}]}]})",
                             whole),
            rec("ab", "xyz"));
}

}  // namespace
}  // namespace tether
