#include "actors/policy/wire/usage.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <boost/json/basic_parser_impl.hpp>
#include <cstring>

#include "actors/policy/wire/json_members.hpp"

namespace tether {
namespace {

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// The counts of one `usage` object, gathered while Boost.JSON's own parser validates it, with no
// document built (the document and its allocations were most of what reading usage cost). Only
// the object's own members count, and `cached_tokens` in its prompt_tokens_details (OpenAI chat)
// or input_tokens_details (Responses); a repeated key's last value counts, as a document keeps it.
class usage_counts
    : public json_members<usage_counts, 27, true> {  // sizeof "cache_creation_input_tokens"
 public:
  enum count {
    prompt,
    input,
    cache_creation,
    cache_read,
    completion,
    output,
    prompt_cached,  // prompt_tokens_details.cached_tokens
    input_cached,   // input_tokens_details.cached_tokens
    none
  };
  std::optional<std::uint64_t> counts[none];

  bool on_object_begin(boost::json::error_code&) { return open(); }
  bool on_object_end(std::size_t, boost::json::error_code&) { return close(); }
  bool on_array_begin(boost::json::error_code&) { return open(); }
  bool on_array_end(std::size_t, boost::json::error_code&) { return close(); }
  void on_member(std::string_view key) {
    member_ = key == "prompt_tokens"                 ? prompt
              : key == "input_tokens"                ? input
              : key == "cache_creation_input_tokens" ? cache_creation
              : key == "cache_read_input_tokens"     ? cache_read
              : key == "completion_tokens"           ? completion
              : key == "output_tokens"               ? output
                                                     : none;
    details_ = key == "prompt_tokens_details"  ? prompt_cached
               : key == "input_tokens_details" ? input_cached
                                               : none;
  }
  void on_nested_member(std::string_view key) {
    nested_ = key == "cached_tokens" ? in_details_ : none;
  }
  bool on_string_part(boost::json::string_view, std::size_t, boost::json::error_code&) {
    return other_value();
  }
  bool on_string(boost::json::string_view, std::size_t, boost::json::error_code&) {
    return other_value();
  }
  bool on_int64(std::int64_t n, boost::json::string_view, boost::json::error_code&) {
    if (n < 0) return other_value();
    return set(static_cast<std::uint64_t>(n));
  }
  bool on_uint64(std::uint64_t n, boost::json::string_view, boost::json::error_code&) {
    return set(n);
  }
  bool on_double(double, boost::json::string_view, boost::json::error_code&) {
    return other_value();
  }
  bool on_bool(bool, boost::json::error_code&) { return other_value(); }
  bool on_null(boost::json::error_code&) { return other_value(); }

 private:
  // A member whose value is not a non-negative integer has no count (its earlier value is gone).
  bool set(std::uint64_t n) {
    if (depth() == 1 && member_ != none) counts[member_] = n;
    if (depth() == 1 && details_ != none) counts[details_].reset();  // a number is no details
    if (depth() == 2 && nested_ != none) counts[nested_] = n;
    return true;
  }
  bool other_value() {
    if (depth() == 1 && member_ != none) counts[member_].reset();
    // A details member's new value replaces the old one's cached count, whatever it holds.
    if (depth() == 1 && details_ != none) counts[details_].reset();
    if (depth() == 2 && nested_ != none) counts[nested_].reset();
    return true;
  }
  bool open() {
    other_value();
    enter();
    if (depth() == 2) {
      in_details_ = details_;
      nested_ = none;
    }
    return true;
  }
  bool close() {
    if (depth() == 2) in_details_ = none;
    leave();
    return true;
  }

  count member_ = none;
  // The details member the current top-level key names, the one whose value is open (an array's
  // elements have no keys, so only an object's cached_tokens is read) and the count its current
  // member is: none where they are not.
  count details_ = none;
  count in_details_ = none;
  count nested_ = none;
};

// Where the value of the last `"usage"` member that is an object starts, or npos. From the end
// (the usage object closes a response), jumping between the key's rarest byte with memrchr: a
// stream relays every event through here, and OpenAI's chunks carry `"usage":null` until the
// last, so a byte-by-byte search from the end read nearly every event whole. In a string the
// quotes of a "usage" key are escaped, so a match is a member name.
std::size_t last_usage_object(std::string_view text) {
  constexpr std::string_view key = "\"usage\"";
  constexpr std::size_t g_at = 4;  // key[g_at] == 'g'
  std::size_t end = text.size();   // 'g' is looked for before this
  while (end > 0) {
    const void* hit = ::memrchr(text.data(), 'g', end);
    if (hit == nullptr) break;
    const auto g = static_cast<std::size_t>(static_cast<const char*>(hit) - text.data());
    end = g;
    if (g < g_at || text.substr(g - g_at, key.size()) != key) continue;
    auto pos = g - g_at + key.size();
    while (pos < text.size() && is_ws(text[pos])) ++pos;
    if (pos >= text.size() || text[pos] != ':') continue;
    ++pos;
    while (pos < text.size() && is_ws(text[pos])) ++pos;
    if (pos < text.size() && text[pos] == '{') return pos;
  }
  return std::string_view::npos;
}

}  // namespace

std::optional<token_usage> usage_of(std::string_view text) {
  const auto pos = last_usage_object(text);
  if (pos == std::string_view::npos) return std::nullopt;
  boost::json::parse_options opts;
  opts.max_depth = 8;
  boost::json::basic_parser<usage_counts> p{opts};
  boost::system::error_code ec;
  // The object ends where its value does; what follows it is the rest of the response.
  p.write_some(false, text.data() + pos, text.size() - pos, ec);
  if (ec) return std::nullopt;  // an incomplete value is an error here too
  const auto& c = p.handler().counts;
  token_usage u;
  u.prompt = c[usage_counts::prompt];
  if (!u.prompt) {
    if (auto input = c[usage_counts::input]) {
      // Anthropic counts the cached part of the prompt apart; the model read it all.
      *input +=
          c[usage_counts::cache_creation].value_or(0) + c[usage_counts::cache_read].value_or(0);
      u.prompt = input;
    }
  }
  u.completion = c[usage_counts::completion];
  if (!u.completion) u.completion = c[usage_counts::output];
  if (!u.prompt && !u.completion) return std::nullopt;
  u.cached = c[usage_counts::prompt_cached];
  if (!u.cached) u.cached = c[usage_counts::input_cached];
  if (!u.cached) u.cached = c[usage_counts::cache_read];
  return u;
}

void merge_usage(token_usage& into, const token_usage& later) {
  if (later.prompt) into.prompt = later.prompt;
  if (later.completion) into.completion = later.completion;
  if (later.cached) into.cached = later.cached;
}

}  // namespace tether
