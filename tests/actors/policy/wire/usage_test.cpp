#include "actors/policy/wire/usage.hpp"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace tether {
namespace {

TEST(UsageTest, TheOpenAIAndAnthropicShapesAreRead) {
  auto chat = usage_of(
      R"({"id":"c","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}})");
  EXPECT_EQ(chat, (token_usage{12, 5, std::nullopt}));
  auto responses =
      usage_of(R"({"id":"r","usage":{"input_tokens":7,"output_tokens":3,"total_tokens":10}})");
  EXPECT_EQ(responses, (token_usage{7, 3, std::nullopt}));
  auto messages = usage_of(
      R"({"type":"message","usage":{"input_tokens":7,"cache_read_input_tokens":100,"cache_creation_input_tokens":20,"output_tokens":3}})");
  EXPECT_EQ(messages, (token_usage{127, 3, 100}));
  auto embeddings = usage_of(R"({"data":[],"usage":{"prompt_tokens":4,"total_tokens":4}})");
  EXPECT_EQ(embeddings, (token_usage{4, std::nullopt, std::nullopt}));
}

// The cached part of the prompt, where each API tells it.
TEST(UsageTest, TheCachedPartOfThePromptIsRead) {
  EXPECT_EQ(
      usage_of(
          R"({"usage":{"prompt_tokens":120,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":100,"audio_tokens":0},"completion_tokens_details":{"cached_tokens":7}}})"),
      (token_usage{120, 5, 100}));
  EXPECT_EQ(
      usage_of(
          R"({"usage":{"input_tokens":120,"input_tokens_details":{"cached_tokens":64},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":0}}})"),
      (token_usage{120, 5, 64}));
  // A details object without the count, a count outside one or deeper: none.
  EXPECT_EQ(usage_of(R"({"usage":{"prompt_tokens":3,"prompt_tokens_details":{}}})"),
            (token_usage{3, std::nullopt, std::nullopt}));
  EXPECT_EQ(usage_of(R"({"usage":{"prompt_tokens":3,"cached_tokens":2}})"),
            (token_usage{3, std::nullopt, std::nullopt}));
  EXPECT_EQ(
      usage_of(
          R"({"usage":{"prompt_tokens":3,"prompt_tokens_details":{"x":{"cached_tokens":2}}}})"),
      (token_usage{3, std::nullopt, std::nullopt}));
  // Only with a count of the prompt or the answer.
  EXPECT_FALSE(usage_of(R"({"usage":{"prompt_tokens_details":{"cached_tokens":2}}})"));
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
  EXPECT_EQ(u, (token_usage{25, 15, std::nullopt}));
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
            (token_usage{1, 2, std::nullopt}));
}

// The reading as it was written first: the usage object parsed into a document. usage_of reads it
// without one; both must agree on every text.
std::optional<token_usage> usage_by_document(std::string_view text) {
  constexpr std::string_view key = "\"usage\"";
  auto count_of = [](const boost::json::object& o,
                     std::string_view name) -> std::optional<std::uint64_t> {
    const auto* v = o.if_contains(name);
    if (v == nullptr) return std::nullopt;
    if (v->is_int64() && v->as_int64() >= 0) return static_cast<std::uint64_t>(v->as_int64());
    if (v->is_uint64()) return v->as_uint64();
    return std::nullopt;
  };
  auto is_ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  for (auto at = text.rfind(key); at != std::string_view::npos;
       at = at == 0 ? std::string_view::npos : text.rfind(key, at - 1)) {
    auto pos = at + key.size();
    while (pos < text.size() && is_ws(text[pos])) ++pos;
    if (pos >= text.size() || text[pos] != ':') continue;
    ++pos;
    while (pos < text.size() && is_ws(text[pos])) ++pos;
    if (pos >= text.size() || text[pos] != '{') continue;
    boost::json::parse_options opts;
    opts.max_depth = 8;
    boost::json::parser p{{}, opts};
    boost::system::error_code ec;
    p.write_some(text.data() + pos, text.size() - pos, ec);
    if (ec) return std::nullopt;
    const auto v = p.release();
    const auto& o = v.as_object();
    token_usage u;
    u.prompt = count_of(o, "prompt_tokens");
    if (!u.prompt) {
      if (auto input = count_of(o, "input_tokens")) {
        *input += count_of(o, "cache_creation_input_tokens").value_or(0) +
                  count_of(o, "cache_read_input_tokens").value_or(0);
        u.prompt = input;
      }
    }
    u.completion = count_of(o, "completion_tokens");
    if (!u.completion) u.completion = count_of(o, "output_tokens");
    if (!u.prompt && !u.completion) return std::nullopt;
    for (auto details : {"prompt_tokens_details", "input_tokens_details"}) {
      const auto* d = o.if_contains(details);
      if (!u.cached && d != nullptr && d->is_object())
        u.cached = count_of(d->as_object(), "cached_tokens");
    }
    if (!u.cached) u.cached = count_of(o, "cache_read_input_tokens");
    return u;
  }
  return std::nullopt;
}

TEST(UsageTest, ReadsEveryTextAsTheDocumentWould) {
  std::mt19937_64 rng(30);
  const std::vector<std::string> keys{"prompt_tokens",
                                      "input_tokens",
                                      "cache_creation_input_tokens",
                                      "cache_read_input_tokens",
                                      "completion_tokens",
                                      "output_tokens",
                                      "total_tokens",
                                      "prompt_tokens_details",
                                      "input_tokens_details",
                                      "cached_tokens",
                                      "prompt\\u005ftokens",
                                      "output_tokens_x"};
  const std::vector<std::string> values{"0",
                                        "7",
                                        "18446744073709551615",
                                        "18446744073709551616",
                                        "-1",
                                        "1.0",
                                        "1e2",
                                        "\"3\"",
                                        "null",
                                        "true",
                                        "{\"prompt_tokens\":5}",
                                        "{\"cached_tokens\":9}",
                                        "{\"cached_tokens\":4,\"cached_tokens\":null}",
                                        "{\"a\":[{\"cached_tokens\":1}],\"cached_tokens\":3}",
                                        "{\"a\":{\"cached_tokens\":1}}",
                                        "[{\"cached_tokens\":6}]",
                                        "[1,2]",
                                        "{}"};
  auto pick = [&](const auto& list) {
    return list[std::uniform_int_distribution<std::size_t>(0, list.size() - 1)(rng)];
  };
  int agreed_with_counts = 0;
  int agreed_with_cached = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string object = "{";
    const auto members = std::uniform_int_distribution<int>(0, 5)(rng);
    for (int m = 0; m < members; ++m) {
      if (m > 0) object += rng() % 2 ? "," : " , ";
      object += "\"" + pick(keys) + "\"" + (rng() % 2 ? ":" : " : ") + pick(values);
    }
    object += "}";
    std::string text = R"({"id":"x","usage":)" + object + (rng() % 2 ? "}" : R"(,"more":[1]})");
    if (rng() % 8 == 0)
      text.resize(std::uniform_int_distribution<std::size_t>(0, text.size())(rng));
    const auto expected = usage_by_document(text);
    ASSERT_EQ(usage_of(text), expected) << text;
    if (expected) ++agreed_with_counts;
    if (expected && expected->cached) ++agreed_with_cached;
  }
  EXPECT_GT(agreed_with_counts, 2000);  // the texts exercise the counts, not only refusals
  EXPECT_GT(agreed_with_cached, 200);
}

}  // namespace
}  // namespace tether
