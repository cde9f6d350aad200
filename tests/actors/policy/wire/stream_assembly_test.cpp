// The whole answer assembled from an upstream stream: per surface, from streams shaped as
// llama-server and OpenAI/Anthropic send them, whatever the events' cut; and the failures (a
// stream cut before its terminal event, an error event, an answer over the limit).
#include "actors/policy/wire/stream_assembly.hpp"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <string>
#include <vector>

namespace tether {
namespace {

namespace json = boost::json;

// The whole SSE events of `stream` (each ends with a blank line), as the framer cuts them.
std::vector<std::string> events_of(std::string_view stream) {
  std::vector<std::string> out;
  while (!stream.empty()) {
    const auto end = stream.find("\n\n");
    if (end == std::string_view::npos) {
      out.emplace_back(stream);
      break;
    }
    out.emplace_back(stream.substr(0, end + 2));
    stream.remove_prefix(end + 2);
  }
  return out;
}

struct result {
  std::string body;
  stream_assembly::failure failed = stream_assembly::failure::none;
  std::string error;
};

result assemble(surface where, std::string_view stream, std::uint64_t max_bytes = 0,
                std::int64_t now = 1700000000, stream_assembly_shape shape = {}) {
  stream_assembly a{where, max_bytes, shape};
  for (const auto& e : events_of(stream)) a.add(e);
  result r;
  r.body = a.finish(now);
  r.failed = a.failed();
  r.error = a.error();
  return r;
}

json::value parsed(const result& r) {
  EXPECT_EQ(r.failed, stream_assembly::failure::none) << r.error;
  return json::parse(r.body);
}

// ---- recorded from llama-server ---------------------------------------------------------------

// Recorded from llama.cpp's llama-server (the snapshot the suite builds, a random-weights model,
// temperature 0): each surface's stream (chat and completions with include_usage and logprobs)
// and the engine's whole answer to the same request, made just after.
constexpr std::string_view llama_chat_stream =
    R"fx(data: {"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1796644928,"id":"chatcmpl-LRbeIlhxZ1lw6AERyIpmHVIHpLxHrUfY","model":"small.gguf","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}

data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":" city"},"logprobs":{"content":[{"id":642,"token":" city","bytes":[32,99,105,116,121],"logprob":-0.006542221177369356,"top_logprobs":[{"id":642,"token":" city","bytes":[32,99,105,116,121],"logprob":-0.006542221177369356}]}]}}],"created":1796644928,"id":"chatcmpl-LRbeIlhxZ1lw6AERyIpmHVIHpLxHrUfY","model":"small.gguf","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}

data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":" w"},"logprobs":{"content":[{"id":282,"token":" w","bytes":[32,119],"logprob":-3.695494797284482e-06,"top_logprobs":[{"id":282,"token":" w","bytes":[32,119],"logprob":-3.695494797284482e-06}]}]}}],"created":1796644928,"id":"chatcmpl-LRbeIlhxZ1lw6AERyIpmHVIHpLxHrUfY","model":"small.gguf","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}

data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":" to"},"logprobs":{"content":[{"id":362,"token":" to","bytes":[32,116,111],"logprob":-0.061530329287052155,"top_logprobs":[{"id":362,"token":" to","bytes":[32,116,111],"logprob":-0.061530329287052155}]}]}}],"created":1796644928,"id":"chatcmpl-LRbeIlhxZ1lw6AERyIpmHVIHpLxHrUfY","model":"small.gguf","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}

data: {"choices":[{"finish_reason":"length","index":0,"delta":{}}],"created":1796644928,"id":"chatcmpl-LRbeIlhxZ1lw6AERyIpmHVIHpLxHrUfY","model":"small.gguf","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}

data: {"choices":[],"created":1796644928,"id":"chatcmpl-LRbeIlhxZ1lw6AERyIpmHVIHpLxHrUfY","model":"small.gguf","system_fingerprint":"b0-unknown","object":"chat.completion.chunk","usage":{"completion_tokens":3,"prompt_tokens":18,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":0}},"timings":{"cache_n":0,"prompt_n":18,"prompt_ms":195.394,"prompt_per_token_ms":10.855222222222222,"prompt_per_second":92.1215595156453,"predicted_n":3,"predicted_ms":63.813,"predicted_per_token_ms":21.271,"predicted_per_second":47.01236425179822}}

data: [DONE]

)fx";
constexpr std::string_view llama_chat_whole =
    R"fx({"choices":[{"finish_reason":"length","index":0,"message":{"role":"assistant","content":" city w to"},"logprobs":{"content":[{"id":642,"token":" city","bytes":[32,99,105,116,121],"logprob":-0.006542221177369356,"top_logprobs":[{"id":642,"token":" city","bytes":[32,99,105,116,121],"logprob":-0.006542221177369356}]},{"id":282,"token":" w","bytes":[32,119],"logprob":-3.695494797284482e-06,"top_logprobs":[{"id":282,"token":" w","bytes":[32,119],"logprob":-3.695494797284482e-06}]},{"id":362,"token":" to","bytes":[32,116,111],"logprob":-0.061530329287052155,"top_logprobs":[{"id":362,"token":" to","bytes":[32,116,111],"logprob":-0.061530329287052155}]}]}}],"created":1796644929,"model":"small.gguf","system_fingerprint":"b0-unknown","object":"chat.completion","usage":{"completion_tokens":3,"prompt_tokens":18,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":0}},"id":"chatcmpl-48U2krhFtb3ySb2iiCk3uEazPmooie8b","timings":{"cache_n":0,"prompt_n":18,"prompt_ms":149.678,"prompt_per_token_ms":8.315444444444445,"prompt_per_second":120.25815417095365,"predicted_n":3,"predicted_ms":123.149,"predicted_per_token_ms":41.04966666666667,"predicted_per_second":24.360733745300408}})fx";
constexpr std::string_view llama_completions_stream =
    R"fx(data: {"choices":[{"text":" give","index":0,"logprobs":{"content":[{"id":518,"token":" give","bytes":[32,103,105,118,101],"logprob":-2.8610638764803298e-05,"top_logprobs":[{"id":518,"token":" give","bytes":[32,103,105,118,101],"logprob":-2.8610638764803298e-05}]}]},"finish_reason":null}],"created":1796644933,"model":"small.gguf","system_fingerprint":"b0-unknown","object":"text_completion","id":"chatcmpl-HBliq4T7CfmUD4fv0woysoYPcxhgPqJf"}

data: {"choices":[{"text":" four","index":0,"logprobs":{"content":[{"id":571,"token":" four","bytes":[32,102,111,117,114],"logprob":-0.032404981553554535,"top_logprobs":[{"id":571,"token":" four","bytes":[32,102,111,117,114],"logprob":-0.032404981553554535}]}]},"finish_reason":null}],"created":1796644933,"model":"small.gguf","system_fingerprint":"b0-unknown","object":"text_completion","id":"chatcmpl-HBliq4T7CfmUD4fv0woysoYPcxhgPqJf"}

data: {"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"length"}],"created":1796644933,"model":"small.gguf","system_fingerprint":"b0-unknown","object":"text_completion","usage":{"completion_tokens":2,"prompt_tokens":6,"total_tokens":8,"prompt_tokens_details":{"cached_tokens":0}},"id":"chatcmpl-HBliq4T7CfmUD4fv0woysoYPcxhgPqJf","timings":{"cache_n":0,"prompt_n":6,"prompt_ms":199.762,"prompt_per_token_ms":33.29366666666667,"prompt_per_second":30.035742533615,"predicted_n":2,"predicted_ms":48.537,"predicted_per_token_ms":24.2685,"predicted_per_second":41.20567814244803}}

data: [DONE]

)fx";
constexpr std::string_view llama_completions_whole =
    R"fx({"choices":[{"text":" give four","index":0,"logprobs":{"content":[{"id":518,"token":" give","bytes":[32,103,105,118,101],"logprob":-2.8610638764803298e-05,"top_logprobs":[{"id":518,"token":" give","bytes":[32,103,105,118,101],"logprob":-2.8610638764803298e-05}]},{"id":571,"token":" four","bytes":[32,102,111,117,114],"logprob":-0.032404981553554535,"top_logprobs":[{"id":571,"token":" four","bytes":[32,102,111,117,114],"logprob":-0.032404981553554535}]}]},"finish_reason":"length"}],"created":1796644933,"model":"small.gguf","system_fingerprint":"b0-unknown","object":"text_completion","usage":{"completion_tokens":2,"prompt_tokens":6,"total_tokens":8,"prompt_tokens_details":{"cached_tokens":0}},"id":"chatcmpl-8wpMrp2Fz4FikiPIfcy2pDxFApz5ETvr","timings":{"cache_n":0,"prompt_n":6,"prompt_ms":53.714,"prompt_per_token_ms":8.952333333333334,"prompt_per_second":111.70272182298842,"predicted_n":2,"predicted_ms":29.793,"predicted_per_token_ms":14.8965,"predicted_per_second":67.12986271943075}})fx";
constexpr std::string_view llama_messages_stream = R"fx(event: message_start
data: {"type":"message_start","message":{"id":"chatcmpl-hIKwKTG5pD7KpOb8jTzFOnEGDjl2pQIr","type":"message","role":"assistant","content":[],"model":"small.gguf","stop_reason":null,"stop_sequence":null,"usage":{"cache_read_input_tokens":14,"input_tokens":39,"output_tokens":0}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" "}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" change"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":2}}

event: message_stop
data: {"type":"message_stop"}

)fx";
constexpr std::string_view llama_messages_whole =
    R"fx({"id":"chatcmpl-0i7y22W2d0oombOWD2Rrc65ko8yOTPhV","type":"message","role":"assistant","content":[{"type":"text","text":"  change"}],"model":"small.gguf","stop_reason":"max_tokens","stop_sequence":null,"usage":{"cache_read_input_tokens":52,"input_tokens":1,"output_tokens":2}})fx";
constexpr std::string_view llama_responses_stream = R"fx(event: response.created
data: {"type":"response.created","response":{"id":"resp_sVgOD0XXTJ459A6C6KN7TmTAE7AAySU0","object":"response","status":"in_progress"}}

event: response.in_progress
data: {"type":"response.in_progress","response":{"id":"resp_sVgOD0XXTJ459A6C6KN7TmTAE7AAySU0","object":"response","status":"in_progress"}}

event: response.output_item.added
data: {"type":"response.output_item.added","item":{"content":[],"id":"msg_VLjIjj9d3Xq6xfQ8Myy1pzvzhRNEvKdo","role":"assistant","status":"in_progress","type":"message"}}

event: response.content_part.added
data: {"type":"response.content_part.added","item_id":"msg_VLjIjj9d3Xq6xfQ8Myy1pzvzhRNEvKdo","part":{"type":"output_text","text":""}}

event: response.output_text.delta
data: {"type":"response.output_text.delta","item_id":"msg_VLjIjj9d3Xq6xfQ8Myy1pzvzhRNEvKdo","delta":" "}

event: response.output_text.delta
data: {"type":"response.output_text.delta","item_id":"msg_VLjIjj9d3Xq6xfQ8Myy1pzvzhRNEvKdo","delta":" change"}

event: response.output_text.done
data: {"type":"response.output_text.done","item_id":"msg_VLjIjj9d3Xq6xfQ8Myy1pzvzhRNEvKdo","text":"  change"}

event: response.content_part.done
data: {"type":"response.content_part.done","item_id":"msg_VLjIjj9d3Xq6xfQ8Myy1pzvzhRNEvKdo","part":{"type":"output_text","annotations":[],"logprobs":[],"text":"  change"}}

event: response.output_item.done
data: {"type":"response.output_item.done","item":{"type":"message","status":"completed","id":"msg_VLjIjj9d3Xq6xfQ8Myy1pzvzhRNEvKdo","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"  change"}],"role":"assistant"}}

event: response.completed
data: {"type":"response.completed","response":{"id":"resp_sVgOD0XXTJ459A6C6KN7TmTAE7AAySU0","object":"response","created_at":1796644975,"status":"completed","model":"small.gguf","output":[{"type":"message","status":"completed","id":"msg_VLjIjj9d3Xq6xfQ8Myy1pzvzhRNEvKdo","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"  change"}],"role":"assistant"}],"usage":{"input_tokens":53,"output_tokens":2,"total_tokens":55,"input_tokens_details":{"cached_tokens":0}}}}

)fx";
constexpr std::string_view llama_responses_whole =
    R"fx({"completed_at":1796644976,"created_at":1796644976,"id":"resp_hbD8DrQXsopteoqYuoSjfuMqhqJoVnzH","model":"small.gguf","object":"response","output":[{"content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"  change"}],"id":"msg_EngGMybjcWx5g7rCDw93P29EIV1SHJdm","role":"assistant","status":"completed","type":"message"}],"status":"completed","usage":{"input_tokens":53,"output_tokens":2,"total_tokens":55,"input_tokens_details":{"cached_tokens":0}}})fx";

// What differs between two of the engine's answers by nature: the ids it draws, the time, its
// timings, and (Anthropic's surface ignores cache_prompt) how much of the prompt it had cached.
void mask(json::value& v) {
  if (auto* o = v.if_object()) {
    for (auto& [key, value] : *o) {
      if (key == "id" || key == "created" || key == "created_at" || key == "completed_at" ||
          key == "timings" || key == "cache_read_input_tokens" ||
          (key == "input_tokens" && o->contains("cache_read_input_tokens"))) {
        value = "<by nature>";
      } else {
        mask(value);
      }
    }
  } else if (auto* a = v.if_array()) {
    for (auto& e : *a) mask(e);
  }
}

TEST(StreamAssemblyTest, RecordedLlamaServerStreamsAssembleToItsWholeAnswers) {
  const struct {
    surface where;
    std::string_view stream;
    std::string_view whole;
  } recorded[] = {
      {surface::chat, llama_chat_stream, llama_chat_whole},
      {surface::completions, llama_completions_stream, llama_completions_whole},
      {surface::messages, llama_messages_stream, llama_messages_whole},
      {surface::responses, llama_responses_stream, llama_responses_whole},
  };
  for (const auto& r : recorded) {
    SCOPED_TRACE(name_of(r.where));
    auto got = parsed(assemble(r.where, r.stream));
    auto want = json::parse(r.whole);
    mask(got);
    mask(want);
    EXPECT_EQ(got, want);
  }
}

// The same streams cut before their terminal event: no answer.
TEST(StreamAssemblyTest, RecordedLlamaServerStreamsCutShortFail) {
  const std::pair<surface, std::string_view> recorded[] = {
      {surface::chat, llama_chat_stream},
      {surface::completions, llama_completions_stream},
      {surface::messages, llama_messages_stream},
      {surface::responses, llama_responses_stream},
  };
  for (const auto& [where, stream] : recorded) {
    auto events = events_of(stream);
    events.pop_back();  // [DONE], message_stop, response.completed
    std::string cut;
    for (const auto& e : events) cut += e;
    EXPECT_EQ(assemble(where, cut).failed, stream_assembly::failure::malformed) << name_of(where);
  }
}

// ---- chat ------------------------------------------------------------------------------------

// Tool calls split over chunks as OpenAI sends them: the first delta names the call (id, type,
// name), the next ones carry pieces of its arguments; two calls interleaved by index.
TEST(StreamAssemblyTest, ChatToolCallsAreMergedByIndex) {
  const std::string stream =
      R"(data: {"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get","arguments":""}}]},"logprobs":null,"finish_reason":null}]})"
      "\n\n"
      R"(data: {"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"put","arguments":"{\"k\""}}]},"logprobs":null,"finish_reason":null}]})"
      "\n\n"
      R"(data: {"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]},"logprobs":null,"finish_reason":null}]})"
      "\n\n"
      R"(data: {"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Oslo\"}"}},{"index":1,"function":{"arguments":":1}"}}]},"logprobs":null,"finish_reason":"tool_calls"}]})"
      "\n\n"
      R"(data: {"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","system_fingerprint":"fp","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13}})"
      "\n\n"
      "data: [DONE]\n\n";
  auto answer = parsed(assemble(surface::chat, stream));
  EXPECT_EQ(answer, json::parse(R"({"id":"c1","object":"chat.completion","created":7,"model":"m",
    "system_fingerprint":"fp","choices":[{"index":0,"message":{"role":"assistant","content":null,
    "tool_calls":[{"id":"call_a","type":"function","function":{"name":"get","arguments":"{\"city\":\"Oslo\"}"}},
                  {"id":"call_b","type":"function","function":{"name":"put","arguments":"{\"k\":1}"}}]},
    "logprobs":null,"finish_reason":"tool_calls"}],
    "usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13}})"));
}

// A tool call as llama-server streams it (recorded, its arguments' pieces trimmed to a few): the
// role chunk says content null and no content piece follows, yet its whole answer says content
// "" — which tether's answer must say too; OpenAI's whole answer to the same stream says null.
TEST(StreamAssemblyTest, ChatContentThatNeverCameIsEmptyForAnEngineWhoseWholeAnswerSaysSo) {
  const std::string stream =
      R"(data: {"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1796654519,"id":"chatcmpl-x","model":"small.gguf","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"})"
      "\n\n"
      R"(data: {"choices":[{"finish_reason":null,"index":0,"delta":{"tool_calls":[{"index":0,"id":"8euy","type":"function","function":{"name":"w","arguments":"{"}}]}}],"created":1796654520,"id":"chatcmpl-x","model":"small.gguf","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"})"
      "\n\n"
      R"(data: {"choices":[{"finish_reason":null,"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"c\":\"b\""}}]}}],"created":1796654520,"id":"chatcmpl-x","model":"small.gguf","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"})"
      "\n\n"
      R"(data: {"choices":[{"finish_reason":null,"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"}"}}]}}],"created":1796654520,"id":"chatcmpl-x","model":"small.gguf","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"})"
      "\n\n"
      R"(data: {"choices":[{"finish_reason":"tool_calls","index":0,"delta":{}}],"created":1796654520,"id":"chatcmpl-x","model":"small.gguf","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"})"
      "\n\n"
      R"(data: {"choices":[],"created":1796654520,"id":"chatcmpl-x","model":"small.gguf","system_fingerprint":"b0-unknown","object":"chat.completion.chunk","usage":{"completion_tokens":35,"prompt_tokens":43,"total_tokens":78}})"
      "\n\n"
      "data: [DONE]\n\n";
  auto whole = [](std::string_view content) {
    return json::parse(
        R"({"choices":[{"finish_reason":"tool_calls","index":0,"message":{"role":"assistant","content":)" +
        std::string(content) +
        R"(,"tool_calls":[{"type":"function","function":{"name":"w","arguments":"{\"c\":\"b\"}"},"id":"8euy"}]}}],"created":1796654520,"model":"small.gguf","system_fingerprint":"b0-unknown","object":"chat.completion","usage":{"completion_tokens":35,"prompt_tokens":43,"total_tokens":78},"id":"chatcmpl-x"})");
  };
  EXPECT_EQ(parsed(assemble(surface::chat, stream, 0, 1700000000, {.content_never_null = true})),
            whole(R"("")"));
  EXPECT_EQ(parsed(assemble(surface::chat, stream)), whole("null"));
  // Content that came is the content, whatever the engine.
  const std::string with_text =
      R"(data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":null},"finish_reason":null}]})"
      "\n\n"
      R"(data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]})"
      "\n\n"
      "data: [DONE]\n\n";
  EXPECT_EQ(parsed(assemble(surface::chat, with_text, 0, 1700000000, {.content_never_null = true}))
                .at("choices")
                .at(0)
                .at("message")
                .at("content"),
            "hi");
}

// Content, reasoning and per-token logprobs concatenated; several choices kept apart.
TEST(StreamAssemblyTest, ChatContentReasoningAndLogprobsAreConcatenatedPerChoice) {
  const std::string stream =
      R"(data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":1,"delta":{"role":"assistant","content":"B"},"logprobs":{"content":[{"token":"B","logprob":-1.0,"bytes":[66],"top_logprobs":[]}],"refusal":null},"finish_reason":null},{"index":0,"delta":{"role":"assistant","reasoning_content":"think","content":"A"},"logprobs":{"content":[{"token":"A","logprob":-0.5,"bytes":[65],"top_logprobs":[]}],"refusal":null},"finish_reason":null}]})"
      "\n\n"
      R"(data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":"ing","content":"a"},"logprobs":{"content":[{"token":"a","logprob":-0.25,"bytes":[97],"top_logprobs":[]}],"refusal":null},"finish_reason":"length"},{"index":1,"delta":{},"logprobs":null,"finish_reason":"stop"}]})"
      "\n\ndata: [DONE]\n\n";
  auto answer = parsed(assemble(surface::chat, stream));
  auto choices = answer.at("choices").as_array();
  ASSERT_EQ(choices.size(), 2u);
  EXPECT_EQ(
      choices[0],
      json::parse(
          R"({"index":0,"message":{"role":"assistant","reasoning_content":"thinking","content":"Aa"},
    "logprobs":{"content":[{"token":"A","logprob":-0.5,"bytes":[65],"top_logprobs":[]},{"token":"a","logprob":-0.25,"bytes":[97],"top_logprobs":[]}],"refusal":null},
    "finish_reason":"length"})"));
  EXPECT_EQ(choices[1].at("message").at("content"), "B");
  EXPECT_EQ(choices[1].at("finish_reason"), "stop");
  EXPECT_EQ(choices[1].at("logprobs").at("content").as_array().size(), 1u);
  EXPECT_FALSE(answer.as_object().contains("usage"));
}

// However the events are cut into reads (each event alone, "\r\n" line ends), the answer is the
// same; comments and keep-alives are not events.
TEST(StreamAssemblyTest, CommentsAndCrlfLineEndsAreRead) {
  const std::string stream =
      ": keep-alive\r\n\r\n"
      "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","
      "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}"
      "\r\n\r\n"
      "data: [DONE]\r\n\r\n";
  stream_assembly a{surface::chat, 0};
  std::size_t from = 0;
  while (from < stream.size()) {
    const auto end = stream.find("\r\n\r\n", from) + 4;
    a.add(std::string_view(stream).substr(from, end - from));
    from = end;
  }
  ASSERT_TRUE(a.complete());
  auto answer = json::parse(a.finish(0));
  EXPECT_EQ(answer.at("choices").at(0).at("message").at("content"), "x");
}

// ---- completions -----------------------------------------------------------------------------

// The legacy logprobs' parallel arrays are concatenated.
TEST(StreamAssemblyTest, CompletionsTextAndLegacyLogprobs) {
  const std::string stream =
      R"(data: {"id":"cmpl-1","object":"text_completion","created":3,"model":"m","choices":[{"text":"He","index":0,"logprobs":{"tokens":["He"],"token_logprobs":[-0.1],"top_logprobs":[{"He":-0.1}],"text_offset":[0]},"finish_reason":null}]})"
      "\n\n"
      R"(data: {"id":"cmpl-1","object":"text_completion","created":3,"model":"m","choices":[{"text":"llo","index":0,"logprobs":{"tokens":["llo"],"token_logprobs":[-0.2],"top_logprobs":[{"llo":-0.2}],"text_offset":[2]},"finish_reason":"length"}]})"
      "\n\n"
      R"(data: {"id":"cmpl-1","object":"text_completion","created":3,"model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}})"
      "\n\ndata: [DONE]\n\n";
  auto answer = parsed(assemble(surface::completions, stream));
  EXPECT_EQ(answer,
            json::parse(R"({"id":"cmpl-1","object":"text_completion","created":3,"model":"m",
    "choices":[{"index":0,"text":"Hello","logprobs":{"tokens":["He","llo"],"token_logprobs":[-0.1,-0.2],
    "top_logprobs":[{"He":-0.1},{"llo":-0.2}],"text_offset":[0,2]},"finish_reason":"length"}],
    "usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}})"));
}

// ---- responses -------------------------------------------------------------------------------

TEST(StreamAssemblyTest, ResponsesTakesTheTerminalEventsResponse) {
  const std::string stream =
      "event: response.created\ndata: "
      "{\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"status\":\"in_progress\"}}\n\n"
      "event: response.output_text.delta\ndata: "
      "{\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n"
      "event: response.incomplete\ndata: "
      "{\"type\":\"response.incomplete\",\"response\":{\"id\":\"r\",\"object\":\"response\","
      "\"created_at\":5,\"completed_at\":6,\"status\":\"incomplete\",\"output\":[]}}\n\n";
  EXPECT_EQ(
      parsed(assemble(surface::responses, stream)),
      json::parse(
          R"({"id":"r","object":"response","created_at":5,"completed_at":6,"status":"incomplete","output":[]})"));
  // An engine whose terminal event has no completed_at (its whole answer has one): the moment
  // the answer was finished.
  const std::string without =
      "data: "
      "{\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"created_at\":5,\"status\":"
      "\"completed\"}}\n\n";
  EXPECT_EQ(parsed(assemble(surface::responses, without, 0, 99)).at("completed_at"), 99);
}

// ---- messages --------------------------------------------------------------------------------

// A text block and a tool_use block whose input comes in pieces, parsed at the block's stop;
// message_delta's stop reason and usage on message_start's message.
TEST(StreamAssemblyTest, MessagesBlocksAndToolInputAreAssembled) {
  const std::string stream =
      "event: message_start\ndata: "
      "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":"
      "\"assistant\",\"content\":[],\"model\":\"m\",\"stop_reason\":null,\"stop_sequence\":null,"
      "\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n"
      "event: content_block_start\ndata: "
      "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":"
      "\"\"}}\n\n"
      "event: ping\ndata: {\"type\":\"ping\"}\n\n"
      "event: content_block_delta\ndata: "
      "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":"
      "\"Let me \"}}\n\n"
      "event: content_block_delta\ndata: "
      "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":"
      "\"look.\"}}\n\n"
      "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
      "event: content_block_start\ndata: "
      "{\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\","
      "\"id\":\"toolu_1\",\"name\":\"get\",\"input\":{}}}\n\n"
      "event: content_block_delta\ndata: "
      "{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\","
      "\"partial_json\":\"{\\\"city\\\": \\\"Os\"}}\n\n"
      "event: content_block_delta\ndata: "
      "{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\","
      "\"partial_json\":\"lo\\\"}\"}}\n\n"
      "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n"
      "event: message_delta\ndata: "
      "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},"
      "\"usage\":{\"output_tokens\":25}}\n\n"
      "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
  EXPECT_EQ(parsed(assemble(surface::messages, stream)),
            json::parse(R"({"id":"msg_1","type":"message","role":"assistant","content":[
              {"type":"text","text":"Let me look."},
              {"type":"tool_use","id":"toolu_1","name":"get","input":{"city":"Oslo"}}],
              "model":"m","stop_reason":"tool_use","stop_sequence":null,
              "usage":{"input_tokens":10,"output_tokens":25}})"));
}

// ---- failures --------------------------------------------------------------------------------

// Cut anywhere before its terminal event, a stream is no answer.
TEST(StreamAssemblyTest, AStreamCutBeforeItsTerminalEventFails) {
  const std::pair<surface, std::string> cut[] = {
      {surface::chat,
       "data: "
       "{\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":"
       "\"stop\"}]}\n\n"},
      {surface::completions, "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\"x\"}]}\n\n"},
      {surface::responses,
       "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{}}\n\n"},
      {surface::messages,
       "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\"}}\n\n"
       "event: message_delta\ndata: "
       "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n"},
  };
  for (const auto& [where, stream] : cut) {
    auto r = assemble(where, stream);
    EXPECT_EQ(r.failed, stream_assembly::failure::malformed) << name_of(where);
    EXPECT_TRUE(r.body.empty());
    EXPECT_EQ(r.error, "upstream stream ended before its final event");
  }
}

TEST(StreamAssemblyTest, AnErrorEventOrAnEventThatIsNotJsonFails) {
  auto error =
      assemble(surface::chat,
               "data: {\"error\":{\"message\":\"context full\",\"code\":500}}\n\ndata: [DONE]\n\n");
  EXPECT_EQ(error.failed, stream_assembly::failure::malformed);
  EXPECT_EQ(error.error, "upstream stream reported an error");
  auto named = assemble(
      surface::messages,
      "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n");
  EXPECT_EQ(named.failed, stream_assembly::failure::malformed);
  auto garbage = assemble(surface::chat, "data: {not json\n\ndata: [DONE]\n\n");
  EXPECT_EQ(garbage.failed, stream_assembly::failure::malformed);
  EXPECT_EQ(garbage.error, "upstream event is not a JSON object");
}

// max_response_bytes bounds the answer: an endless stream stops at the limit, not at its end,
// and an answer just over it is refused at the end.
TEST(StreamAssemblyTest, TheAnswerIsHeldToTheLimit) {
  stream_assembly endless{surface::chat, 1000};
  const std::string piece = R"(data: {"id":"c","choices":[{"index":0,"delta":{"content":")" +
                            std::string(100, 'x') +
                            R"("}}]})"
                            "\n\n";
  int fed = 0;
  while (endless.failed() == stream_assembly::failure::none && fed < 1000) {
    endless.add(piece);
    ++fed;
  }
  EXPECT_EQ(endless.failed(), stream_assembly::failure::too_large);
  EXPECT_LE(fed, 11);
  // Content of 950 bytes fits as it grows; the answer around it does not.
  const std::string near = R"(data: {"id":"c","choices":[{"index":0,"delta":{"content":")" +
                           std::string(950, 'x') + "\"}}]}\n\ndata: [DONE]\n\n";
  auto over = assemble(surface::chat, near, 1000);
  EXPECT_EQ(over.failed, stream_assembly::failure::too_large);
  EXPECT_EQ(assemble(surface::chat, near, 2000).failed, stream_assembly::failure::none);
}

}  // namespace
}  // namespace tether
