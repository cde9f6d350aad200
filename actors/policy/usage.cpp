#include "actors/policy/usage.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <boost/json/basic_parser_impl.hpp>

namespace tether {
namespace {

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// The counts of one `usage` object, gathered while Boost.JSON's own parser validates it, with no
// document built (the document and its allocations were most of what reading usage cost). Only
// the object's own members count; a repeated key's last value counts, as a document keeps it.
class usage_counts {
 public:
  static constexpr std::size_t max_array_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_object_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_string_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_key_size = static_cast<std::size_t>(-1);

  enum count { prompt, input, cache_creation, cache_read, completion, output, none };
  std::optional<std::uint64_t> counts[none];

  bool on_document_begin(boost::json::error_code&) { return true; }
  bool on_document_end(boost::json::error_code&) { return true; }
  bool on_object_begin(boost::json::error_code&) { return open(); }
  bool on_object_end(std::size_t, boost::json::error_code&) { return close(); }
  bool on_array_begin(boost::json::error_code&) { return open(); }
  bool on_array_end(std::size_t, boost::json::error_code&) { return close(); }
  bool on_key_part(boost::json::string_view s, std::size_t, boost::json::error_code&) {
    key_part(s);
    return true;
  }
  bool on_key(boost::json::string_view s, std::size_t, boost::json::error_code&) {
    key_part(s);
    if (depth_ == 1) {
      const std::string_view key{key_, key_size_};
      member_ = key_size_ > sizeof key_                ? none
                : key == "prompt_tokens"               ? prompt
                : key == "input_tokens"                ? input
                : key == "cache_creation_input_tokens" ? cache_creation
                : key == "cache_read_input_tokens"     ? cache_read
                : key == "completion_tokens"           ? completion
                : key == "output_tokens"               ? output
                                                       : none;
    }
    key_size_ = 0;
    return true;
  }
  bool on_string_part(boost::json::string_view, std::size_t, boost::json::error_code&) {
    return other_value();
  }
  bool on_string(boost::json::string_view, std::size_t, boost::json::error_code&) {
    return other_value();
  }
  bool on_number_part(boost::json::string_view, boost::json::error_code&) { return true; }
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
  bool on_comment_part(boost::json::string_view, boost::json::error_code&) { return true; }
  bool on_comment(boost::json::string_view, boost::json::error_code&) { return true; }

 private:
  // A member whose value is not a non-negative integer has no count (its earlier value is gone).
  bool set(std::uint64_t n) {
    if (depth_ == 1 && member_ != none) counts[member_] = n;
    return true;
  }
  bool other_value() {
    if (depth_ == 1 && member_ != none) counts[member_].reset();
    return true;
  }
  bool open() {
    other_value();
    ++depth_;
    return true;
  }
  bool close() {
    --depth_;
    return true;
  }
  void key_part(boost::json::string_view s) {
    if (depth_ != 1) return;
    if (key_size_ + s.size() <= sizeof key_) std::copy(s.begin(), s.end(), key_ + key_size_);
    key_size_ += s.size();
  }

  std::size_t depth_ = 0;
  count member_ = none;
  char key_[27] = {};  // sizeof "cache_creation_input_tokens"
  std::size_t key_size_ = 0;
};

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
    return u;
  }
  return std::nullopt;
}

void merge_usage(token_usage& into, const token_usage& later) {
  if (later.prompt) into.prompt = later.prompt;
  if (later.completion) into.completion = later.completion;
}

}  // namespace tether
