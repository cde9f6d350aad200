#include "bench/mock/anthropic_bodies.hpp"

#include <boost/json.hpp>

namespace tether::mock {
namespace {

namespace json = boost::json;

// A whole message counts this many output tokens, as the OpenAI bodies' whole answers do.
constexpr std::int64_t whole_output_tokens = 5;

std::string message_id(const completion_context& ctx) {
  return "msg_mock_" + std::to_string(ctx.request_id);
}

// A `message` object; `done` false gives message_start's: no content, no stop reason yet.
json::object message_object(const completion_context& ctx, bool done, std::string_view text,
                            std::int64_t output_tokens) {
  json::array content;
  if (done) content.push_back(json::object{{"type", "text"}, {"text", text}});
  return {{"id", message_id(ctx)},
          {"type", "message"},
          {"role", "assistant"},
          {"content", std::move(content)},
          {"model", ctx.model},
          {"stop_reason", done ? json::value("end_turn") : json::value(nullptr)},
          {"stop_sequence", nullptr},
          {"usage",
           json::object{{"input_tokens", prompt_tokens(ctx)}, {"output_tokens", output_tokens}}}};
}

std::string count_tokens_body(const completion_context& ctx) {
  return json::serialize(json::object{{"input_tokens", prompt_tokens(ctx)}});
}

}  // namespace

std::string_view anthropic_error_type(unsigned status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
    case 529:
      return "overloaded_error";
    default:
      return "api_error";
  }
}

std::string anthropic_error_body(unsigned status, std::string_view message) {
  json::object error{{"type", anthropic_error_type(status)}, {"message", message}};
  return json::serialize(json::object{{"type", "error"}, {"error", std::move(error)}});
}

std::string messages_body(const completion_context& ctx) {
  if (ctx.api == api_kind::count_tokens) return count_tokens_body(ctx);
  return json::serialize(message_object(ctx, true, full_text(ctx), whole_output_tokens));
}

std::string padded_messages_body(const completion_context& ctx, std::size_t total_bytes) {
  if (ctx.api == api_kind::count_tokens) {
    auto body = count_tokens_body(ctx);
    if (total_bytes > body.size()) body.append(total_bytes - body.size(), ' ');
    return body;
  }
  auto text = full_text(ctx);
  const auto base = json::serialize(message_object(ctx, true, text, whole_output_tokens)).size();
  // 'x' needs no escaping, so each one adds exactly one byte to the serialized body.
  if (total_bytes > base) text.append(total_bytes - base, 'x');
  return json::serialize(message_object(ctx, true, text, whole_output_tokens));
}

std::string messages_stream_piece_events(const completion_context& ctx, std::uint32_t index,
                                         std::uint32_t count) {
  std::string out;
  if (index == 0) {
    // Anthropic counts the first output token in message_start already.
    out += named_event("message_start",
                       {{"type", "message_start"}, {"message", message_object(ctx, false, "", 1)}});
    out += named_event("content_block_start",
                       {{"type", "content_block_start"},
                        {"index", 0},
                        {"content_block", json::object{{"type", "text"}, {"text", ""}}}});
    out += named_event("ping", {{"type", "ping"}});
  }
  out += named_event(
      "content_block_delta",
      {{"type", "content_block_delta"},
       {"index", 0},
       {"delta", json::object{{"type", "text_delta"}, {"text", piece_text(ctx, index, count)}}}});
  if (index + 1 != count) return out;
  out += named_event("content_block_stop", {{"type", "content_block_stop"}, {"index", 0}});
  out +=
      named_event("message_delta",
                  {{"type", "message_delta"},
                   {"delta", json::object{{"stop_reason", "end_turn"}, {"stop_sequence", nullptr}}},
                   {"usage", json::object{{"output_tokens", stream_output_tokens(count)}}}});
  out += named_event("message_stop", {{"type", "message_stop"}});
  return out;
}

std::string_view messages_half_event() {
  return "event: content_block_delta\n"
         R"(data: {"type":"content_block_delta","index":0,)"
         R"("delta":{"type":"text_delta","text":"cut-mid-event)";
}

}  // namespace tether::mock
