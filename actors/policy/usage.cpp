#include "actors/policy/usage.hpp"

#include <boost/json.hpp>

namespace tether {
namespace {

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

std::optional<std::uint64_t> count_of(const boost::json::object& o, std::string_view name) {
  const auto* v = o.if_contains(name);
  if (v == nullptr) return std::nullopt;
  if (v->is_int64() && v->as_int64() >= 0) return static_cast<std::uint64_t>(v->as_int64());
  if (v->is_uint64()) return v->as_uint64();
  return std::nullopt;
}

}  // namespace

std::optional<token_usage> usage_of(std::string_view text) {
  constexpr std::string_view key = "\"usage\"";
  // From the end: the usage object closes a response, and in a string the quotes of a
  // "usage" key are escaped, so a match is a member name.
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
    if (ec) return std::nullopt;  // an incomplete value is an error here too
    const auto v = p.release();
    if (!v.is_object()) return std::nullopt;
    const auto& o = v.as_object();
    token_usage u;
    u.prompt = count_of(o, "prompt_tokens");
    if (!u.prompt) {
      if (auto input = count_of(o, "input_tokens")) {
        // Anthropic counts the cached part of the prompt apart; the model read it all.
        *input += count_of(o, "cache_creation_input_tokens").value_or(0) +
                  count_of(o, "cache_read_input_tokens").value_or(0);
        u.prompt = input;
      }
    }
    u.completion = count_of(o, "completion_tokens");
    if (!u.completion) u.completion = count_of(o, "output_tokens");
    if (!u.prompt && !u.completion) return std::nullopt;
    return u;
  }
  return std::nullopt;
}

void merge_usage(token_usage& into, const token_usage& later) {
  if (later.prompt) into.prompt = later.prompt;
  if (later.completion) into.completion = later.completion;
}

}  // namespace tether
