#include "bench/mock/openai_bodies.hpp"

#include <chrono>

#include <boost/json.hpp>

#include "bench/mock/anthropic_bodies.hpp"

namespace tether::mock {
namespace {

namespace json = boost::json;

constexpr std::size_t embedding_dimensions = 8;
// A whole answer counts this many output tokens.
constexpr std::int64_t whole_output_tokens = 5;

std::int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string id_for(const completion_context& ctx) {
  const char* prefix = ctx.api == api_kind::chat        ? "chatcmpl-mock-"
                       : ctx.api == api_kind::responses ? "resp_mock_"
                                                        : "cmpl-mock-";
  return prefix + std::to_string(ctx.request_id);
}

// Anthropic's paths, whose bodies anthropic_bodies.cpp makes.
bool is_anthropic(const completion_context& ctx) {
  return ctx.api == api_kind::messages || ctx.api == api_kind::count_tokens;
}

json::object usage(std::int64_t prompt, std::int64_t completion) {
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion}};
}

json::object envelope(const completion_context& ctx, std::string_view object) {
  return {{"id", id_for(ctx)},
          {"object", object},
          {"created", unix_seconds()},
          {"model", ctx.model},
          {"system_fingerprint", "fp_tether_mock"}};
}

}  // namespace

std::string full_text(const completion_context& ctx) {
  return "This is mock response #" + std::to_string(ctx.request_id) + ".";
}

std::string piece_text(const completion_context& ctx, std::uint32_t index, std::uint32_t count) {
  if (count == 1) return full_text(ctx);
  return "#" + std::to_string(ctx.request_id) + " piece " + std::to_string(index + 1) + "/" +
         std::to_string(count) + " ";
}

std::int64_t stream_output_tokens(std::uint32_t count) {
  return count == 1 ? whole_output_tokens : static_cast<std::int64_t>(count);
}

std::int64_t prompt_tokens(const completion_context& ctx) {
  return static_cast<std::int64_t>(ctx.prompt_bytes / 4 + 1);
}

std::string error_body(std::string_view message, std::string_view type, std::string_view code) {
  json::object error{{"message", message}, {"type", type}, {"param", nullptr}, {"code", code}};
  return json::serialize(json::object{{"error", std::move(error)}});
}

std::string error_body_for(const completion_context& ctx, unsigned status, std::string_view message,
                           std::string_view type, std::string_view code) {
  if (is_anthropic(ctx)) return anthropic_error_body(status, message);
  return error_body(message, type, code);
}

std::string named_event(std::string_view name, const json::object& data) {
  std::string out("event: ");
  out.append(name).append("\ndata: ").append(json::serialize(data)).append("\n\n");
  return out;
}

namespace {

json::object completion_object(const completion_context& ctx, std::string_view text) {
  json::object choice;
  choice["index"] = 0;
  if (ctx.api == api_kind::chat) {
    choice["message"] =
        json::object{{"role", "assistant"}, {"content", text}, {"refusal", nullptr}};
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = "stop";
  auto body = envelope(ctx, ctx.api == api_kind::chat ? "chat.completion" : "text_completion");
  body["choices"] = json::array{std::move(choice)};
  body["usage"] = usage(prompt_tokens(ctx), whole_output_tokens);
  return body;
}

}  // namespace

namespace {

// The Responses API's usage: input/output tokens and their details.
json::object responses_usage(const completion_context& ctx, std::int64_t output) {
  const auto input = prompt_tokens(ctx);
  return {{"input_tokens", input},
          {"input_tokens_details", json::object{{"cached_tokens", 0}}},
          {"output_tokens", output},
          {"output_tokens_details", json::object{{"reasoning_tokens", 0}}},
          {"total_tokens", input + output}};
}

std::string message_id(const completion_context& ctx) {
  return "msg_mock_" + std::to_string(ctx.request_id);
}

json::object output_text(std::string_view text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", json::array{}}};
}

json::object output_message(const completion_context& ctx, std::string_view status,
                            json::array content) {
  return {{"id", message_id(ctx)},
          {"type", "message"},
          {"status", status},
          {"role", "assistant"},
          {"content", std::move(content)}};
}

// A `response` object: `status` "in_progress" (no output yet, no usage) or "completed".
json::object response_object(const completion_context& ctx, std::string_view status,
                             std::string_view text) {
  const bool done = status == "completed";
  json::array output;
  if (done) output.push_back(output_message(ctx, "completed", json::array{output_text(text)}));
  json::object response{{"id", id_for(ctx)},
                        {"object", "response"},
                        {"created_at", unix_seconds()},
                        {"status", status},
                        {"error", nullptr},
                        {"incomplete_details", nullptr},
                        {"model", ctx.model},
                        {"output", std::move(output)},
                        {"parallel_tool_calls", true},
                        {"tool_choice", "auto"},
                        {"tools", json::array{}},
                        {"usage", done ? json::value(responses_usage(ctx, whole_output_tokens))
                                       : json::value(nullptr)}};
  if (done) response["completed_at"] = unix_seconds();
  return response;
}

}  // namespace

std::string completion_body(const completion_context& ctx) {
  if (is_anthropic(ctx)) return messages_body(ctx);
  if (ctx.api == api_kind::responses) {
    return json::serialize(response_object(ctx, "completed", full_text(ctx)));
  }
  return json::serialize(completion_object(ctx, full_text(ctx)));
}

std::string padded_completion_body(const completion_context& ctx, std::size_t total_bytes) {
  if (is_anthropic(ctx)) return padded_messages_body(ctx, total_bytes);
  auto text = full_text(ctx);
  auto object_of = [&](std::string_view t) {
    return ctx.api == api_kind::responses ? response_object(ctx, "completed", t)
                                          : completion_object(ctx, t);
  };
  const auto base = json::serialize(object_of(text)).size();
  // 'x' needs no escaping, so each one adds exactly one byte to the serialized body.
  if (total_bytes > base) text.append(total_bytes - base, 'x');
  return json::serialize(object_of(text));
}

std::string stream_piece_events(const completion_context& ctx, std::uint32_t index,
                                std::uint32_t count) {
  if (is_anthropic(ctx)) return messages_stream_piece_events(ctx, index, count);
  if (ctx.api != api_kind::responses) {
    std::string out("data: ");
    out.append(stream_chunk_body(ctx, index, count)).append("\n\n");
    if (index + 1 == count && ctx.include_usage) {
      auto last =
          envelope(ctx, ctx.api == api_kind::chat ? "chat.completion.chunk" : "text_completion");
      last["choices"] = json::array{};
      last["usage"] = usage(prompt_tokens(ctx), stream_output_tokens(count));
      out.append("data: ").append(json::serialize(last)).append("\n\n");
    }
    return out;
  }
  // Four opening events, then one delta per piece, then four closing ones.
  constexpr std::int64_t opening = 4;
  std::string out;
  const auto item = message_id(ctx);
  auto seq = [](std::int64_t n) { return json::value(n); };
  if (index == 0) {
    auto created = response_object(ctx, "in_progress", "");
    out += named_event(
        "response.created",
        {{"type", "response.created"}, {"sequence_number", seq(0)}, {"response", created}});
    out += named_event("response.in_progress", {{"type", "response.in_progress"},
                                                {"sequence_number", seq(1)},
                                                {"response", std::move(created)}});
    out += named_event("response.output_item.added",
                       {{"type", "response.output_item.added"},
                        {"sequence_number", seq(2)},
                        {"output_index", 0},
                        {"item", output_message(ctx, "in_progress", json::array{})}});
    out += named_event("response.content_part.added", {{"type", "response.content_part.added"},
                                                       {"sequence_number", seq(3)},
                                                       {"item_id", item},
                                                       {"output_index", 0},
                                                       {"content_index", 0},
                                                       {"part", output_text("")}});
  }
  out += named_event("response.output_text.delta", {{"type", "response.output_text.delta"},
                                                    {"sequence_number", seq(opening + index)},
                                                    {"item_id", item},
                                                    {"output_index", 0},
                                                    {"content_index", 0},
                                                    {"delta", piece_text(ctx, index, count)},
                                                    {"logprobs", json::array{}}});
  if (index + 1 != count) return out;
  std::string text;
  for (std::uint32_t i = 0; i < count; ++i) text += piece_text(ctx, i, count);
  auto n = opening + count;
  out += named_event("response.output_text.done", {{"type", "response.output_text.done"},
                                                   {"sequence_number", seq(n)},
                                                   {"item_id", item},
                                                   {"output_index", 0},
                                                   {"content_index", 0},
                                                   {"text", text},
                                                   {"logprobs", json::array{}}});
  out += named_event("response.content_part.done", {{"type", "response.content_part.done"},
                                                    {"sequence_number", seq(n + 1)},
                                                    {"item_id", item},
                                                    {"output_index", 0},
                                                    {"content_index", 0},
                                                    {"part", output_text(text)}});
  out += named_event("response.output_item.done",
                     {{"type", "response.output_item.done"},
                      {"sequence_number", seq(n + 2)},
                      {"output_index", 0},
                      {"item", output_message(ctx, "completed", json::array{output_text(text)})}});
  auto completed = response_object(ctx, "completed", text);
  completed["usage"] = responses_usage(ctx, stream_output_tokens(count));
  out += named_event("response.completed", {{"type", "response.completed"},
                                            {"sequence_number", seq(n + 3)},
                                            {"response", std::move(completed)}});
  return out;
}

std::string_view stream_end_events(const completion_context& ctx) {
  if (ctx.api == api_kind::responses || is_anthropic(ctx)) return {};
  return "data: [DONE]\n\n";
}

std::string_view half_stream_event(const completion_context& ctx) {
  if (is_anthropic(ctx)) return messages_half_event();
  return R"(data: {"choices":[{"delta":{"content":"cut-mid-event)";
}

namespace {

json::object stream_chunk_object(const completion_context& ctx, std::uint32_t index,
                                 std::uint32_t count) {
  const bool last = index + 1 == count;
  auto text = piece_text(ctx, index, count);
  json::object choice;
  choice["index"] = 0;
  if (ctx.api == api_kind::chat) {
    json::object delta;
    if (index == 0) delta["role"] = "assistant";
    delta["content"] = text;
    if (index == 0) delta["refusal"] = nullptr;  // as OpenAI's first delta
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = last ? json::value("stop") : json::value(nullptr);
  auto body =
      envelope(ctx, ctx.api == api_kind::chat ? "chat.completion.chunk" : "text_completion");
  body["choices"] = json::array{std::move(choice)};
  return body;
}

}  // namespace

std::string stream_chunk_body(const completion_context& ctx, std::uint32_t index,
                              std::uint32_t count) {
  return json::serialize(stream_chunk_object(ctx, index, count));
}

std::string stamped_stream_piece_events(const completion_context& ctx, std::uint32_t index,
                                        std::uint32_t count, std::int64_t sent_us) {
  if (ctx.api != api_kind::chat && ctx.api != api_kind::completion) {
    return stream_piece_events(ctx, index, count);
  }
  // An extra top-level field: SDKs keep unknown fields of a chunk and parse the rest as usual.
  auto body = stream_chunk_object(ctx, index, count);
  body["mock_sent_us"] = sent_us;
  std::string out("data: ");
  out.append(json::serialize(body)).append("\n\n");
  return out;
}

std::string embeddings_body(const completion_context& ctx, std::size_t inputs) {
  json::array data;
  data.reserve(inputs);
  for (std::size_t i = 0; i < inputs; ++i) {
    json::array vector;
    vector.reserve(embedding_dimensions);
    // Deterministic and distinct per input, which is all a test can want from a mock vector.
    for (std::size_t d = 0; d < embedding_dimensions; ++d) {
      vector.emplace_back(static_cast<double>((i + 1) * (d + 1) % 17) / 16.0 - 0.5);
    }
    data.push_back(
        json::object{{"object", "embedding"}, {"index", i}, {"embedding", std::move(vector)}});
  }
  auto tokens = prompt_tokens(ctx);
  return json::serialize(
      json::object{{"object", "list"},
                   {"data", std::move(data)},
                   {"model", ctx.model},
                   {"usage", json::object{{"prompt_tokens", tokens}, {"total_tokens", tokens}}}});
}

std::size_t embedding_input_count(const json::value& input) {
  const auto* array = input.if_array();
  if (array == nullptr) return 1;
  if (array->empty()) return 0;
  // A flat array of token ids is one input; an array of strings or of token arrays is many.
  if (array->front().is_number()) return 1;
  return array->size();
}

std::string models_body() {
  json::array data;
  for (const char* id : {"mock", "mock-delay-100", "mock-stream-5x50", "mock-fail-503",
                         "mock-ratelimit-1", "mock-hang", "mock-flaky-50"}) {
    data.push_back(
        json::object{{"id", id}, {"object", "model"}, {"created", 0}, {"owned_by", "tether-mock"}});
  }
  return json::serialize(json::object{{"object", "list"}, {"data", std::move(data)}});
}

}  // namespace tether::mock
