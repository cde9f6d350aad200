// A light walk over JSON text that a parser has already validated: it finds the top-level
// members' keys and values by their bytes (strings and nesting only), decoding nothing, building
// nothing. For the edits that keep the rest of a body byte for byte, and for finding a member
// without parsing the values before it.
#pragma once

#include <boost/json.hpp>
#include <cstddef>
#include <optional>
#include <string_view>

namespace tether::json_scan {

struct span {
  std::size_t begin = 0;
  std::size_t end = 0;
};

inline bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

class scanner {
 public:
  explicit scanner(std::string_view text) : s_(text) {}

  void skip_ws() {
    while (pos_ < s_.size() && is_ws(s_[pos_])) ++pos_;
  }
  bool eat(char c) {
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  // A JSON string token starting at pos_ (which must be '"').
  std::optional<span> string_token() {
    skip_ws();
    if (pos_ >= s_.size() || s_[pos_] != '"') return std::nullopt;
    span sp{pos_, 0};
    ++pos_;
    while (pos_ < s_.size()) {
      char c = s_[pos_++];
      if (c == '\\') {
        ++pos_;
      } else if (c == '"') {
        sp.end = pos_;
        return sp;
      }
    }
    return std::nullopt;
  }
  // Any JSON value; the text is already validated, so only nesting and strings matter.
  std::optional<span> value() {
    skip_ws();
    if (pos_ >= s_.size()) return std::nullopt;
    span sp{pos_, 0};
    if (s_[pos_] == '"') return string_token();
    int depth = 0;
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == '"') {
        if (!string_token()) return std::nullopt;
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      if (c == '}' || c == ']') {
        if (depth == 0) break;
        --depth;
        if (depth == 0) {
          ++pos_;
          break;
        }
      }
      if (depth == 0 && (c == ',' || is_ws(c))) break;
      ++pos_;
    }
    sp.end = pos_;
    return sp;
  }
  std::string_view text(span sp) const { return s_.substr(sp.begin, sp.end - sp.begin); }

 private:
  std::string_view s_;
  std::size_t pos_ = 0;
};

// A top-level member's key decoded (escapes and all), compared with `name`.
inline bool key_is(std::string_view key_text, std::string_view name) {
  if (key_text.size() == name.size() + 2 && key_text.substr(1, name.size()) == name) return true;
  if (key_text.find('\\') == std::string_view::npos) return false;
  boost::system::error_code ec;
  auto decoded = boost::json::parse(key_text, ec);
  return !ec && decoded.is_string() && decoded.as_string() == name;
}

}  // namespace tether::json_scan
