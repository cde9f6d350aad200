#include "config/toml_guard.hpp"

#include <cstdint>

#include <fmt/format.h>

namespace tether::config {
namespace {

// The code points toml++ 3.3.0's whitespace table has no answer for (see the header).
bool unclassifiable(char32_t c) {
  return (c >= 0xA1 && c <= 0x499) || (c >= 0x2C5E && c <= 0x3057 && c != 0x3000) ||
         (c >= 0xFB26 && c <= 0xFEFE);
}

struct code_point {
  char32_t value = 0;
  std::size_t size = 0;  // bytes; 0 for a malformed sequence
};

// Well-formed UTF-8 only (no overlong forms, surrogates or values past U+10FFFF), as toml++'s
// decoder: a malformed byte is passed on untouched and toml++ refuses the file there.
code_point decode(std::string_view text, std::size_t at) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[at + i]); };
  const auto follows = [&](std::size_t i) {
    return at + i < text.size() && (byte(i) & 0xC0u) == 0x80u;
  };
  const unsigned char b = byte(0);
  if (b < 0x80) return {b, 1};
  if (b >= 0xC2 && b <= 0xDF && follows(1)) {
    return {static_cast<char32_t>((b & 0x1Fu) << 6 | (byte(1) & 0x3Fu)), 2};
  }
  if (b >= 0xE0 && b <= 0xEF && follows(1) && follows(2)) {
    const char32_t c = (b & 0x0Fu) << 12 | (byte(1) & 0x3Fu) << 6 | (byte(2) & 0x3Fu);
    if (c < 0x800 || (c >= 0xD800 && c <= 0xDFFF)) return {};
    return {c, 3};
  }
  if (b >= 0xF0 && b <= 0xF4 && follows(1) && follows(2) && follows(3)) {
    const char32_t c =
        (b & 0x07u) << 18 | (byte(1) & 0x3Fu) << 12 | (byte(2) & 0x3Fu) << 6 | (byte(3) & 0x3Fu);
    if (c < 0x10000 || c > 0x10FFFF) return {};
    return {c, 4};
  }
  return {};
}

// Where the first of those code points in `text` is, if any.
std::optional<toml_hazard> first_unclassifiable(std::string_view text) {
  std::size_t line = 1, column = 1;
  for (std::size_t at = 0; at < text.size(); ++column) {
    const auto cp = decode(text, at);
    at += cp.size == 0 ? 1 : cp.size;
    if (cp.size != 0 && unclassifiable(cp.value)) {
      toml_hazard h;
      h.line = line;
      h.column = column;
      h.code_point = cp.value;
      return h;
    }
    if (cp.size != 0 && cp.value == '\n') {
      ++line;
      column = 0;
    }
  }
  return std::nullopt;
}

enum class context { outside, comment, basic, literal, multi_basic, multi_literal };

// Copies the text through, rewriting each of those code points as the header says. Its model
// of TOML (where strings and comments are) only has to be right for valid TOML: on any other
// input a wrong guess yields toml++'s syntax error or a refusal, never one of them unrewritten.
class rewriter {
 public:
  explicit rewriter(std::string_view text) : text_(text) { out_.reserve(text.size() + 64); }

  toml_input run() {
    while (at_ < text_.size()) {
      const auto cp = next();
      if (!cp) {
        out_ += raw_;  // malformed UTF-8: toml++ refuses the file there
        continue;
      }
      if (auto refused = step(*cp)) return {{}, std::move(refused)};
    }
    return {std::move(out_), std::nullopt};
  }

 private:
  // The code point at the cursor, advancing past it (and the line/column with it); raw_ holds
  // its bytes.
  std::optional<char32_t> next() {
    const auto cp = decode(text_, at_);
    line_ = next_line_;
    column_ = next_column_;
    ++next_column_;
    const auto size = cp.size == 0 ? 1 : cp.size;
    raw_ = text_.substr(at_, size);
    at_ += size;
    if (cp.size == 0) return std::nullopt;
    if (cp.value == '\n') {
      ++next_line_;
      next_column_ = 1;
    }
    return cp.value;
  }
  // How many `quote` characters follow the cursor, up to `most`.
  std::size_t run_of(char quote, std::size_t most) const {
    std::size_t n = 0;
    while (n < most && at_ + n < text_.size() && text_[at_ + n] == quote) ++n;
    return n;
  }
  void skip(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) next();
  }
  std::optional<toml_hazard> refuse(char32_t c, const char* where) const {
    toml_hazard h;
    h.line = line_;
    h.column = column_;
    h.code_point = c;
    h.problem = fmt::format(
        "character U+{:04X} {}: not accepted here (the TOML parser in use mishandles it)",
        static_cast<std::uint32_t>(c), where);
    return h;
  }
  void escape(char32_t c) { out_ += fmt::format("\\u{:04X}", static_cast<std::uint32_t>(c)); }
  // A code point of a basic string's content.
  void basic_content(char32_t c) {
    if (unclassifiable(c)) {
      escape(c);
    } else {
      out_ += raw_;
    }
  }
  // A code point of a literal string's content, written into the basic string it becomes.
  void literal_content(char32_t c) {
    if (c == '\\' || c == '"') {
      out_ += '\\';
      out_ += static_cast<char>(c);
    } else {
      basic_content(c);
    }
  }
  // A backslash in a basic string was just copied: the code point it escapes follows (toml++
  // tests it for whitespace, a line-ending backslash; the code points after such a backslash
  // are content and rewritten as any other).
  std::optional<toml_hazard> escaped() {
    if (at_ >= text_.size()) return std::nullopt;
    const auto c = next();
    out_ += raw_;
    if (c && unclassifiable(*c)) return refuse(*c, "after a backslash");
    return std::nullopt;
  }

  std::optional<toml_hazard> step(char32_t c) {
    switch (in_) {
      case context::outside:
        return outside(c);
      case context::comment:
        if (c == '\n') in_ = context::outside;
        if (unclassifiable(c)) {
          out_ += '?';
        } else {
          out_ += raw_;
        }
        return std::nullopt;
      case context::basic:
        if (c == '\\') {
          out_ += raw_;
          return escaped();
        }
        if (c == '"' || c == '\n') in_ = context::outside;
        basic_content(c);
        return std::nullopt;
      case context::literal:
        if (c == '\'' || c == '\n') {
          in_ = context::outside;
          out_ += c == '\'' ? "\"" : "\n";
        } else {
          literal_content(c);
        }
        return std::nullopt;
      case context::multi_basic:
        if (c == '\\') {
          out_ += raw_;
          return escaped();
        }
        if (c == '"') {
          close_multi('"');
        } else {
          basic_content(c);
        }
        return std::nullopt;
      case context::multi_literal:
        if (c == '\'') {
          close_multi('\'');
        } else {
          literal_content(c);
        }
        return std::nullopt;
    }
    return std::nullopt;
  }
  std::optional<toml_hazard> outside(char32_t c) {
    if (c == '#') {
      in_ = context::comment;
    } else if (c == '"' || c == '\'') {
      const bool literal = c == '\'';
      const auto more = run_of(static_cast<char>(c), 2);
      skip(more == 2 ? 2 : more);
      if (more == 2) {
        in_ = literal ? context::multi_literal : context::multi_basic;
        out_ += "\"\"\"";
      } else if (more == 0) {
        in_ = literal ? context::literal : context::basic;
        out_ += '"';
      } else {
        out_ += "\"\"";  // an empty string
      }
      return std::nullopt;
    } else if (unclassifiable(c)) {
      return refuse(c, "outside a string or comment");
    }
    out_ += raw_;
    return std::nullopt;
  }
  // `quote` was just read inside a multi-line string: three in a row end it, and up to two
  // more before them belong to its content (""""" is two quotes, then the end).
  void close_multi(char quote) {
    const auto more = run_of(quote, 4);
    skip(more);
    const auto quotes = 1 + more;
    const auto content = more < 2 ? quotes : quotes - 3;
    for (std::size_t i = 0; i < content; ++i) {
      out_ += quote == '"' ? "\\\"" : "'";
    }
    if (more >= 2) {
      out_ += "\"\"\"";
      in_ = context::outside;
    }
  }

  std::string_view text_;
  std::string out_;
  std::string_view raw_;  // the bytes of the code point last read
  std::size_t at_ = 0;
  std::size_t line_ = 1, column_ = 1;            // of the code point last read
  std::size_t next_line_ = 1, next_column_ = 1;  // of the one at the cursor
  context in_ = context::outside;
};

}  // namespace

toml_input prepare_toml_input(std::string_view text) {
  // Most files hold none of those code points: toml++ reads them exactly as written.
  if (!first_unclassifiable(text)) return {std::string(text), std::nullopt};
  auto input = rewriter(text).run();
  if (input.refused) return input;
  if (auto left = first_unclassifiable(input.text)) {
    left->problem = fmt::format(
        "character U+{:04X}: not accepted (the TOML parser in use "
        "mishandles it)",
        static_cast<std::uint32_t>(left->code_point));
    return {{}, std::move(left)};
  }
  return input;
}

}  // namespace tether::config
