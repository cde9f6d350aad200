#include "actors/policy/wire/stream_assembly.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <utility>
#include <vector>

#include "actors/policy/wire/sse_event.hpp"

namespace tether {
namespace {

namespace json = boost::json;

// `into[key]` becomes the concatenation of its string and `piece` (a null or absent one is
// empty).
void append_string(json::object& into, std::string_view key, const json::value& piece) {
  if (!piece.is_string()) {
    if (!into.contains(key)) into[key] = piece;
    return;
  }
  auto& slot = into[key];
  if (slot.is_string()) {
    slot.as_string().append(piece.as_string());
  } else {
    slot = piece;
  }
}

// A choice's logprobs: each array member concatenated (chat's content and refusal, legacy
// completions' tokens, token_logprobs, top_logprobs and text_offset), anything else replaced.
void merge_logprobs(json::object& choice, const json::value& piece) {
  auto& slot = choice["logprobs"];
  if (!piece.is_object()) {
    if (!slot.is_object()) slot = piece;
    return;
  }
  if (!slot.is_object()) {
    slot = piece;
    return;
  }
  auto& into = slot.as_object();
  for (const auto& [key, value] : piece.as_object()) {
    auto* existing = into.if_contains(key);
    if (existing != nullptr && existing->is_array() && value.is_array()) {
      auto& a = existing->as_array();
      a.insert(a.end(), value.as_array().begin(), value.as_array().end());
    } else if (existing == nullptr || !value.is_null()) {
      into[key] = value;
    }
  }
}

// About what a value takes serialised, to count an answer's growth without serialising it.
std::size_t approx_size(const json::value& v) {
  if (const auto* s = v.if_string()) return s->size() + 2;
  if (const auto* a = v.if_array()) {
    std::size_t n = 2;
    for (const auto& e : *a) n += approx_size(e) + 1;
    return n;
  }
  if (const auto* o = v.if_object()) {
    std::size_t n = 2;
    for (const auto& [key, value] : *o) n += key.size() + 4 + approx_size(value);
    return n;
  }
  return 8;
}

std::int64_t index_of(const json::object& o) {
  const auto* i = o.if_contains("index");
  return i != nullptr && i->is_int64() ? i->as_int64() : 0;
}

// Items kept by their stream index, in the order of the indexes at the end.
template <class T>
T& by_index(std::vector<std::pair<std::int64_t, T>>& items, std::int64_t index) {
  for (auto& [i, item] : items) {
    if (i == index) return item;
  }
  return items.emplace_back(index, T{}).second;
}

template <class T>
void sort_by_index(std::vector<std::pair<std::int64_t, T>>& items) {
  std::stable_sort(items.begin(), items.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
}

}  // namespace

struct stream_assembly::impl {
  surface where;
  std::uint64_t max_bytes;
  stream_assembly_shape shape;
  // What the answer has grown by so far, counted as the pieces come (the exact size is checked
  // once, at the end): an engine that streams without end is stopped at the limit, not at the
  // end of its stream.
  std::uint64_t grown = 0;
  bool terminal = false;
  failure failed = failure::none;
  std::string error;

  // chat, completions: the chunks' top-level fields. responses: the terminal event's response.
  // messages: message_start's message.
  json::object top;
  std::vector<std::pair<std::int64_t, json::object>> choices;
  // chat: each choice's tool calls by their index.
  std::vector<std::pair<std::int64_t, std::vector<std::pair<std::int64_t, json::object>>>>
      tool_calls;
  // messages: the content blocks, and each tool_use block's input as its pieces came.
  std::vector<std::pair<std::int64_t, json::object>> blocks;
  std::vector<std::pair<std::int64_t, std::string>> inputs;

  void fail(failure kind, std::string message) {
    if (failed != failure::none) return;
    failed = kind;
    error = std::move(message);
  }
  void grow(std::size_t n) {
    grown += n;
    if (max_bytes > 0 && grown > max_bytes)
      fail(failure::too_large, "upstream response is larger than request.max_response_bytes");
  }

  void add(std::string_view text);
  void add_chunk(json::object& chunk);
  void merge_choice(const json::object& piece);
  void merge_delta(json::object& message, std::int64_t choice, const json::object& delta);
  void add_responses_event(std::string_view type, json::object& data);
  void add_messages_event(std::string_view type, json::object& data);
  void close_block(std::int64_t index);
  json::object answer();
};

void stream_assembly::impl::add(std::string_view text) {
  if (terminal || failed != failure::none) return;
  auto e = parse_event(text);
  if (!e.has_data) return;  // a comment or a keep-alive
  const bool openai_stream = where == surface::chat || where == surface::completions;
  if (openai_stream && e.data == "[DONE]") {
    terminal = true;
    return;
  }
  boost::system::error_code ec;
  auto value = json::parse(e.data, ec);
  if (ec || !value.is_object())
    return fail(failure::malformed, "upstream event is not a JSON object");
  auto& data = value.as_object();
  std::string_view type = e.name;
  if (const auto* t = data.if_contains("type"); t != nullptr && t->is_string())
    type = t->as_string();
  if (data.contains("error") || type == "error")
    return fail(failure::malformed, "upstream stream reported an error");
  if (openai_stream) return add_chunk(data);
  if (where == surface::responses) return add_responses_event(type, data);
  if (where == surface::messages) return add_messages_event(type, data);
  fail(failure::malformed, "surface does not stream");
}

void stream_assembly::impl::add_chunk(json::object& chunk) {
  for (auto& [key, value] : chunk) {
    if (key == "choices") {
      if (!value.is_array())
        return fail(failure::malformed, "upstream chunk's choices is not an array");
      for (const auto& c : value.as_array()) {
        if (!c.is_object()) return fail(failure::malformed, "upstream choice is not an object");
        merge_choice(c.as_object());
      }
    } else if (key == "usage") {
      // Engines that report usage send null in the chunks before the one that has it.
      if (!value.is_null()) top["usage"] = std::move(value);
    } else {
      top[key] = std::move(value);  // id, created, model, system_fingerprint, the engine's own
    }
  }
}

void stream_assembly::impl::merge_choice(const json::object& piece) {
  const auto index = index_of(piece);
  auto& choice = by_index(choices, index);
  if (choice.empty()) choice["index"] = index;
  for (const auto& [key, value] : piece) {
    if (key == "index") continue;
    if (key == "delta") {
      if (!value.is_object()) return fail(failure::malformed, "upstream delta is not an object");
      auto& message = choice["message"];
      if (!message.is_object()) message = json::object{};
      merge_delta(message.as_object(), index, value.as_object());
    } else if (key == "text") {
      if (value.is_string()) grow(value.as_string().size());
      append_string(choice, key, value);
    } else if (key == "logprobs") {
      if (!value.is_null()) grow(approx_size(value));
      merge_logprobs(choice, value);
    } else if (!value.is_null() || !choice.contains(key)) {
      choice[key] = value;  // finish_reason (its last word counts), the engine's own
    }
  }
}

void stream_assembly::impl::merge_delta(json::object& message, std::int64_t choice,
                                        const json::object& delta) {
  for (const auto& [key, value] : delta) {
    if (key == "content" || key == "reasoning_content" || key == "refusal") {
      if (value.is_string()) grow(value.as_string().size());
      append_string(message, key, value);
    } else if (key == "tool_calls") {
      if (!value.is_array()) return fail(failure::malformed, "upstream tool_calls is not an array");
      auto& calls = by_index(tool_calls, choice);
      for (const auto& c : value.as_array()) {
        if (!c.is_object()) return fail(failure::malformed, "upstream tool call is not an object");
        const auto& part = c.as_object();
        auto& call = by_index(calls, index_of(part));
        for (const auto& [k, v] : part) {
          if (k == "index") continue;
          if (k == "function" && v.is_object()) {
            auto& fn = call["function"];
            if (!fn.is_object()) fn = json::object{};
            for (const auto& [fk, fv] : v.as_object()) {
              if (fk == "arguments") {
                if (fv.is_string()) grow(fv.as_string().size());
                append_string(fn.as_object(), fk, fv);
              } else if (!fv.is_null() || !fn.as_object().contains(fk)) {
                fn.as_object()[fk] = fv;  // the name comes once, whole
              }
            }
          } else if (!v.is_null() || !call.contains(k)) {
            call[k] = v;  // id, type
          }
        }
        grow(64);
      }
    } else if (!value.is_null() || !message.contains(key)) {
      message[key] = value;  // role, the engine's own
    }
  }
}

void stream_assembly::impl::add_responses_event(std::string_view type, json::object& data) {
  if (type != "response.completed" && type != "response.incomplete" && type != "response.failed")
    return;
  auto* response = data.if_contains("response");
  if (response == nullptr || !response->is_object())
    return fail(failure::malformed, "upstream terminal event has no response object");
  top = std::move(response->as_object());
  terminal = true;
}

void stream_assembly::impl::add_messages_event(std::string_view type, json::object& data) {
  if (type == "message_start") {
    auto* message = data.if_contains("message");
    if (message == nullptr || !message->is_object())
      return fail(failure::malformed, "upstream message_start has no message");
    top = std::move(message->as_object());
  } else if (type == "content_block_start") {
    auto* block = data.if_contains("content_block");
    if (block == nullptr || !block->is_object())
      return fail(failure::malformed, "upstream content_block_start has no block");
    const auto index = index_of(data);
    by_index(blocks, index) = std::move(block->as_object());
    grow(64);
  } else if (type == "content_block_delta") {
    const auto index = index_of(data);
    const auto* d = data.if_contains("delta");
    if (d == nullptr || !d->is_object())
      return fail(failure::malformed, "upstream content_block_delta has no delta");
    const auto& delta = d->as_object();
    auto& block = by_index(blocks, index);
    const auto* kind = delta.if_contains("type");
    const std::string_view k =
        kind != nullptr && kind->is_string() ? std::string_view(kind->as_string()) : "";
    auto text_of = [&](std::string_view key) -> std::string_view {
      const auto* v = delta.if_contains(key);
      return v != nullptr && v->is_string() ? std::string_view(v->as_string()) : "";
    };
    if (k == "text_delta") {
      grow(text_of("text").size());
      append_string(block, "text", delta.at("text"));
    } else if (k == "thinking_delta") {
      grow(text_of("thinking").size());
      append_string(block, "thinking", delta.at("thinking"));
    } else if (k == "signature_delta") {
      grow(text_of("signature").size());
      block["signature"] = text_of("signature");
    } else if (k == "input_json_delta") {
      const auto piece = text_of("partial_json");
      grow(piece.size());
      by_index(inputs, index).append(piece);
    } else if (k == "citations_delta") {
      if (const auto* c = delta.if_contains("citation")) {
        grow(approx_size(*c));
        auto& list = block["citations"];
        if (!list.is_array()) list = json::array{};
        list.as_array().push_back(*c);
      }
    }
  } else if (type == "content_block_stop") {
    close_block(index_of(data));
  } else if (type == "message_delta") {
    if (const auto* d = data.if_contains("delta"); d != nullptr && d->is_object()) {
      for (const auto& [key, value] : d->as_object()) top[key] = value;  // stop_reason, …
    }
    if (const auto* u = data.if_contains("usage"); u != nullptr && u->is_object()) {
      auto& usage = top["usage"];
      if (!usage.is_object()) usage = json::object{};
      for (const auto& [key, value] : u->as_object()) usage.as_object()[key] = value;
    }
  } else if (type == "message_stop") {
    if (top.empty()) return fail(failure::malformed, "upstream message_stop before message_start");
    terminal = true;
  }
}

// A tool_use block's input is the JSON its pieces make; as the engines' own whole answers do, an
// input cut short (max_tokens) or empty is an empty object.
void stream_assembly::impl::close_block(std::int64_t index) {
  auto it =
      std::find_if(inputs.begin(), inputs.end(), [&](const auto& p) { return p.first == index; });
  auto& block = by_index(blocks, index);
  const auto* type = block.if_contains("type");
  if (type == nullptr || !type->is_string() || type->as_string() != "tool_use") return;
  json::value input = json::object{};
  if (it != inputs.end()) {
    boost::system::error_code ec;
    auto parsed = json::parse(it->second, ec);
    if (!ec && parsed.is_object()) input = std::move(parsed);
    inputs.erase(it);
  } else if (const auto* given = block.if_contains("input");
             given != nullptr && given->is_object()) {
    return;
  }
  block["input"] = std::move(input);
}

json::object stream_assembly::impl::answer() {
  if (where == surface::responses) return std::move(top);
  if (where == surface::messages) {
    // A block whose stop never came is closed as it stands.
    while (!inputs.empty()) close_block(inputs.front().first);
    sort_by_index(blocks);
    json::array content;
    for (auto& [index, block] : blocks) content.push_back(std::move(block));
    top["content"] = std::move(content);
    return std::move(top);
  }
  sort_by_index(choices);
  json::array out;
  for (auto& [index, choice] : choices) {
    for (auto& [owner, calls] : tool_calls) {
      if (owner != index) continue;
      sort_by_index(calls);
      json::array list;
      for (auto& [i, call] : calls) list.push_back(std::move(call));
      choice["message"].as_object()["tool_calls"] = std::move(list);
    }
    if (auto* message = choice.if_contains("message");
        shape.content_never_null && message != nullptr && message->is_object()) {
      auto& content = message->as_object()["content"];
      if (content.is_null()) content = "";
    }
    out.push_back(std::move(choice));
  }
  top["choices"] = std::move(out);
  if (where == surface::chat) top["object"] = "chat.completion";
  return std::move(top);
}

stream_assembly::stream_assembly(surface where, std::uint64_t max_bytes,
                                 stream_assembly_shape shape)
    : impl_(std::make_unique<impl>()) {
  impl_->where = where;
  impl_->max_bytes = max_bytes;
  impl_->shape = shape;
}

stream_assembly::~stream_assembly() = default;
stream_assembly::stream_assembly(stream_assembly&&) noexcept = default;
stream_assembly& stream_assembly::operator=(stream_assembly&&) noexcept = default;

void stream_assembly::add(std::string_view event) {
  impl_->add(event);
}

std::string stream_assembly::finish(std::int64_t now_unix_s) {
  auto& s = *impl_;
  if (s.failed != failure::none) return {};
  if (!s.terminal) {
    s.fail(failure::malformed, "upstream stream ended before its final event");
    return {};
  }
  auto answer = s.answer();
  if (s.where == surface::responses && !answer.contains("completed_at") &&
      answer.contains("created_at"))
    answer["completed_at"] = now_unix_s;
  auto body = json::serialize(answer);
  if (s.max_bytes > 0 && body.size() > s.max_bytes) {
    s.fail(failure::too_large, "upstream response is larger than request.max_response_bytes");
    return {};
  }
  return body;
}

bool stream_assembly::complete() const {
  return impl_->terminal;
}

stream_assembly::failure stream_assembly::failed() const {
  return impl_->failed;
}

const std::string& stream_assembly::error() const {
  return impl_->error;
}

}  // namespace tether
