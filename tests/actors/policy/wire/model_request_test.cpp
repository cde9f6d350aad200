#include "actors/policy/wire/model_request.hpp"

#include <gtest/gtest.h>

namespace tether {
namespace {

model_request_info ok(std::string_view body) {
  auto r = inspect_model_request(body, 128);
  EXPECT_TRUE(std::holds_alternative<model_request_info>(r)) << body;
  return std::holds_alternative<model_request_info>(r) ? std::get<model_request_info>(r)
                                                       : model_request_info{};
}

std::string error(std::string_view body, std::uint32_t depth = 128) {
  auto r = inspect_model_request(body, depth);
  EXPECT_TRUE(std::holds_alternative<body_error>(r)) << body;
  return std::holds_alternative<body_error>(r) ? std::get<body_error>(r).message : "";
}

TEST(ModelRequestTest, ModelAndStreamAreRead) {
  auto info = ok(R"({"model":"gpt","stream":true,"messages":[]})");
  EXPECT_EQ(info.model, "gpt");
  EXPECT_TRUE(info.stream);
  EXPECT_FALSE(ok(R"({"model":"gpt"})").stream);
  EXPECT_FALSE(ok(R"({"model":"gpt","stream":null})").stream);
}

TEST(ModelRequestTest, BadBodiesSayWhatIsWrongWithoutQuotingTheBody) {
  EXPECT_NE(error(R"({"model":"x",PROMPT-MARKER)").find("not valid JSON"), std::string::npos);
  EXPECT_EQ(error(R"({"model":"x",PROMPT-MARKER)").find("PROMPT-MARKER"), std::string::npos);
  EXPECT_NE(error("[1]").find("object"), std::string::npos);
  EXPECT_NE(error("{}").find("model"), std::string::npos);
  EXPECT_NE(error(R"({"model":5})").find("string"), std::string::npos);
  EXPECT_NE(error(R"({"model":"a","stream":"yes"})").find("stream"), std::string::npos);
  EXPECT_NE(error("").find("empty"), std::string::npos);
}

TEST(ModelRequestTest, InvalidUtf8IsRefused) {
  error("{\"model\":\"a\xff\"}");
}

TEST(ModelRequestTest, DeepNestingBeyondTheLimitIsRefused) {
  std::string deep = R"({"model":"a","x":)" + std::string(50, '[') + std::string(50, ']') + "}";
  ok(deep);
  EXPECT_NE(error(deep, 10).find("deeper"), std::string::npos);
}

TEST(ModelRequestTest, DuplicateModelKeysAreRefused) {
  EXPECT_NE(error(R"({"model":"a","model":"b"})").find("more than one"), std::string::npos);
  EXPECT_NE(error(R"({"model":"a","mod\u0065l":"b"})").find("more than one"), std::string::npos);
}

// The top-level members are told apart by their decoded keys, and a repeated key's last value
// counts, as in the parsed document; nested members and trailing bytes are what they were.
TEST(ModelRequestTest, MembersAreReadAsTheParsedDocumentHasThem) {
  EXPECT_TRUE(ok(R"({"str\u0065am":true,"model":"a"})").stream);
  EXPECT_FALSE(ok(R"({"model":"a","stream":true,"stream":false})").stream);
  EXPECT_TRUE(ok(R"({"model":"a","stream":"x","stream":true})").stream);
  EXPECT_NE(error(R"({"model":"a","stream":true,"stream":[]})").find("stream"), std::string::npos);
  EXPECT_EQ(ok(R"({"x":{"model":1,"stream":"no"},"model":"top"})").model, "top");
  EXPECT_EQ(ok(R"({"model":"a\"b\u00fc"})").model, "a\"b\xc3\xbc");
  EXPECT_EQ(ok(R"({"m":[{"model":"deep"}],"model":"x"})").model, "x");
  EXPECT_NE(error(R"({"x":{"model":"nested only"}})").find("required"), std::string::npos);
  EXPECT_NE(error(R"({"model":"a"} {})").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error(R"({"model":{"a":1}})").find("string"), std::string::npos);
  EXPECT_NE(error(R"("model")").find("object"), std::string::npos);
}

// The output a request may make, which its token weight reserves: the largest limit it names.
TEST(ModelRequestTest, TheLargestOutputLimitIsRead) {
  EXPECT_FALSE(ok(R"({"model":"a"})").max_output_tokens);
  EXPECT_EQ(ok(R"({"model":"a","max_tokens":600})").max_output_tokens, 600u);
  EXPECT_EQ(ok(R"({"model":"a","max_completion_tokens":70})").max_output_tokens, 70u);
  EXPECT_EQ(ok(R"({"model":"a","max_output_tokens":9})").max_output_tokens, 9u);
  EXPECT_EQ(ok(R"({"model":"a","max_tokens":5,"max_completion_tokens":50})").max_output_tokens,
            50u);
  // Only a non-negative integer at the top level counts; the last of a repeated key decides.
  EXPECT_FALSE(ok(R"({"model":"a","max_tokens":"600"})").max_output_tokens);
  EXPECT_FALSE(ok(R"({"model":"a","max_tokens":-1})").max_output_tokens);
  EXPECT_FALSE(ok(R"({"model":"a","max_tokens":1.5})").max_output_tokens);
  EXPECT_FALSE(ok(R"({"model":"a","x":{"max_tokens":600}})").max_output_tokens);
  EXPECT_FALSE(ok(R"({"model":"a","max_tokens":[600]})").max_output_tokens);
  EXPECT_FALSE(ok(R"({"model":"a","max_tokens":600,"max_tokens":null})").max_output_tokens);
  EXPECT_EQ(ok(R"({"model":"a","max_tokens":null,"max_tokens":8})").max_output_tokens, 8u);
  EXPECT_EQ(ok(R"({"model":"a","max_tok\u0065ns":40})").max_output_tokens, 40u);
  EXPECT_EQ(ok(R"({"model":"a","max_tokens":18446744073709551615})").max_output_tokens,
            18446744073709551615u);
  EXPECT_FALSE(ok(R"({"model":"a","max_tokens_x":3})").max_output_tokens);
}

TEST(ModelRequestTest, RewriteReplacesOnlyTheTopLevelModelAndKeepsEverythingElse) {
  std::string body =
      R"({ "messages":[{"role":"user","content":"model \"x\", {\"model\":1}"}], "model" : "pub",)"
      R"( "temperature":1.0, "nested":{"model":"keep"} })";
  auto out = rewrite_model(body, "meta/llama \"3\"");
  EXPECT_EQ(out, R"({ "messages":[{"role":"user","content":"model \"x\", {\"model\":1}"}], )"
                 R"("model" : "meta/llama \"3\"", "temperature":1.0, "nested":{"model":"keep"} })");
  EXPECT_EQ(ok(out).model, "meta/llama \"3\"");
}

TEST(ModelRequestTest, RewriteFindsAnEscapedKey) {
  auto out = rewrite_model(R"({"mod\u0065l":"pub","n":1})", "up");
  EXPECT_EQ(out, R"({"mod\u0065l":"up","n":1})");
}

// upstream_stream = "always": the caller's stream and stream_options members (however spelt,
// wherever, repeated) give way to a stream request; every other member keeps its bytes, nested
// ones of the same name included.
TEST(ModelRequestTest, AskForStreamReplacesOnlyTheTopLevelStreamMembers) {
  const std::string body =
      R"({"model":"m", "stream" : false,"messages":[{"stream":false}],"stream_options":{"include_usage":false},"str\u0065am":null,"n":1})";
  auto out = ask_for_stream(body, true);
  EXPECT_EQ(
      out,
      R"({"stream":true,"stream_options":{"include_usage":true},"model":"m","messages":[{"stream":false}],"n":1})");
  auto info = std::get<model_request_info>(inspect_model_request(out, 64));
  EXPECT_TRUE(info.stream);
  EXPECT_EQ(ask_for_stream(R"({"model":"m"})", false), R"({"stream":true,"model":"m"})");
  EXPECT_EQ(ask_for_stream(R"({})", false), R"({"stream":true})");
}

// engine = "sglang": the attempt's rid is the body's last member and its only top-level one,
// whatever rid the caller sent (however spelt, repeated); nested ones and every other member keep
// their bytes.
TEST(ModelRequestTest, WithRidReplacesOnlyTheTopLevelRidMembers) {
  const std::string body =
      R"({"rid":"caller", "model":"m","messages":[{"rid":"x"}],"r\u0069d":7 ,"n":1})";
  auto out = with_rid(body, "req-1.0");
  EXPECT_EQ(out, R"({"model":"m","messages":[{"rid":"x"}],"n":1,"rid":"req-1.0"})");
  // Held, then read in place: GCC 12 at -O3 takes a model_request_info moved out of a temporary
  // variant for uninitialised (a false -Wmaybe-uninitialized).
  const auto inspected = inspect_model_request(out, 64);
  ASSERT_TRUE(std::holds_alternative<model_request_info>(inspected));
  EXPECT_EQ(std::get<model_request_info>(inspected).model, "m");
  EXPECT_EQ(with_rid(R"({})", "a.1"), R"({"rid":"a.1"})");
  EXPECT_EQ(with_rid(R"({"model":"m"})", "a.1"), R"({"model":"m","rid":"a.1"})");
}

// The fingerprint a call's id is made of (actors/policy/request/call_identity.hpp): taken only
// when asked for; the same for bodies that differ only in their top-level `stream`,
// `stream_options` and `client_metadata` members (however spelt) or in whitespace, different for
// any other change.
std::uint64_t fingerprint_of(std::string_view body) {
  auto r = inspect_model_request(body, 128, true);
  EXPECT_TRUE(std::holds_alternative<model_request_info>(r)) << body;
  if (!std::holds_alternative<model_request_info>(r)) return 0;
  const auto& info = std::get<model_request_info>(r);
  EXPECT_TRUE(info.body_fingerprint) << body;
  return info.body_fingerprint.value_or(0);
}

TEST(ModelRequestTest, TheFingerprintLeavesOutOnlyTheTopLevelStreamMembers) {
  EXPECT_FALSE(ok(R"({"model":"m"})").body_fingerprint) << "not asked for: not taken";
  const auto base = fingerprint_of(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})");
  for (const char* same : {
           R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]})",
           R"({"stream":false,"model":"m","messages":[{"role":"user","content":"hi"}]})",
           R"({"model":"m","messages":[{"role":"user","content":"hi"}],"stream":null})",
           R"({"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,)"
           R"("stream_options":{"include_usage":true,"x":[1,{"y":2}]}})",
           R"({"model":"m","str\u0065am":true,"messages":[{"role":"user","content":"hi"}]})",
           R"({"model":"m","messages":[{"role":"user","content":"hi"}],)"
           R"("client_metadata":{"a":"1","b":"2"}})",
           R"({"client_metadata":{"b":"2","a":"1"},"model":"m",)"
           R"("messages":[{"role":"user","content":"hi"}]})",
           R"( { "model" : "m" , "messages" : [ { "role" : "user" , "content" : "hi" } ] } )",
       }) {
    EXPECT_EQ(fingerprint_of(same), base) << same;
  }
  for (const char* other : {
           R"({"model":"m","messages":[{"role":"user","content":"ho"}]})",
           R"({"model":"m2","messages":[{"role":"user","content":"hi"}]})",
           R"({"model":"m","messages":[{"role":"user","content":"hi","stream":true}]})",
           R"({"model":"m","messages":[{"role":"user","content":"hi"}],"streams":true})",
           R"({"model":"m","messages":[{"role":"user","content":"hi"}],"n":1})",
           R"({"model":"m","messages":[{"role":"user","content":"hi","client_metadata":{}}]})",
           R"({"model":"m","messages":[{"role":"user","content":"hi"}],"n":10})",
           R"({"model":"m","messages":[{"role":"user","content":"hi"}],"n":1.0})",
           R"({"model":"m","messages":[{"role":"user","content":"hi"}],"n":"1"})",
           R"({"model":"m","messages":[{"role":"user","content":"hi"}],"n":true})",
           R"({"model":"m","messages":[{"role":"user","content":"hi"}],"n":null})",
           R"({"model":"m","messages":[{"role":"user","content":"hi"}],"n":[]})",
           R"({"model":"m","messages":[{"role":"user","content":"hi"}],"n":{}})",
           R"({"messages":[{"role":"user","content":"hi"}],"model":"m"})",  // order is content
           R"({"model":"m","messages":[{"role":"user"},{"content":"hi"}]})",
       }) {
    EXPECT_NE(fingerprint_of(other), base) << other;
  }
  // A key's text and a string's text are told apart, and so are where strings end.
  EXPECT_NE(fingerprint_of(R"({"model":"m","a":"bc"})"),
            fingerprint_of(R"({"model":"m","ab":"c"})"));
  EXPECT_NE(fingerprint_of(R"({"model":"m","a":["b","c"]})"),
            fingerprint_of(R"({"model":"m","a":["bc",""]})"));
  // The facts read are the same with and without it.
  const auto inspected =
      inspect_model_request(R"({"model":"m","stream":true,"max_tokens":7})", 128, true);
  ASSERT_TRUE(std::holds_alternative<model_request_info>(inspected));
  const auto& with = std::get<model_request_info>(inspected);
  EXPECT_EQ(with.model, "m");
  EXPECT_TRUE(with.stream);
  EXPECT_EQ(with.max_output_tokens, 7U);
}

}  // namespace
}  // namespace tether
