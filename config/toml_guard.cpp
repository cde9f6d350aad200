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

// toml++'s horizontal whitespace, ASCII and not: what a line-ending backslash skips on a line.
bool horizontal_whitespace(char32_t c) {
  return c == ' ' || c == '\t' || c == 0xA0 || c == 0x1680 || c == 0x180E ||
         (c >= 0x2000 && c <= 0x200B) || c == 0x202F || c == 0x205F || c == 0x2060 || c == 0x3000 ||
         c == 0xFEFF;
}

struct code_point {
  char32_t value = 0;
  std::size_t size = 0;  // bytes; 0 for a malformed sequence
};

// Well-formed UTF-8 only (no overlong forms, surrogates or values past U+10FFFF).
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

enum class context { outside, comment, basic, literal, multi_basic, multi_literal };

class scanner {
 public:
  explicit scanner(std::string_view text) : text_(text) {}

  std::optional<toml_hazard> run() {
    while (at_ < text_.size()) {
      const auto cp = next();
      if (!cp) continue;  // malformed UTF-8: toml++ refuses the file there
      if (auto hazard = step(*cp)) return hazard;
    }
    return std::nullopt;
  }

 private:
  // The code point at the cursor, advancing past it (and the line/column with it).
  std::optional<char32_t> next() {
    const auto cp = decode(text_, at_);
    line_ = next_line_;
    column_ = next_column_;
    if (cp.size == 0) {
      ++at_;
      ++next_column_;
      return std::nullopt;
    }
    at_ += cp.size;
    if (cp.value == '\n') {
      ++next_line_;
      next_column_ = 1;
    } else {
      ++next_column_;
    }
    return cp.value;
  }
  // How many `quote` characters follow the cursor, up to `most`.
  std::size_t run_of(char quote, std::size_t most) const {
    std::size_t n = 0;
    while (n < most && at_ + n < text_.size() && text_[at_ + n] == quote) ++n;
    return n;
  }
  void skip_quotes(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) next();
  }
  std::optional<toml_hazard> hazard(char32_t c, const char* where) const {
    toml_hazard h;
    h.line = line_;
    h.column = column_;
    h.code_point = c;
    h.problem = fmt::format(
        "character U+{:04X} {}: not accepted here (the TOML parser in use mishandles it)",
        static_cast<std::uint32_t>(c), where);
    return h;
  }

  std::optional<toml_hazard> step(char32_t c) {
    if (skipping_) {
      // After a line-ending backslash: toml++ tests each code point for whitespace until the
      // first that is not; line breaks are taken before that test.
      if (c == '\n' || c == '\r' || horizontal_whitespace(c)) return std::nullopt;
      skipping_ = false;
      if (unclassifiable(c)) {
        return hazard(c, "right after a line-ending backslash (write it as a \\u escape)");
      }
    }
    switch (in_) {
      case context::outside: {
        const auto before = last_outside_;
        last_outside_ = c;
        if (c == '#') {
          in_ = context::comment;
        } else if ((c == '"' || c == '\'') && opens_string_after(before)) {
          const auto more = run_of(static_cast<char>(c), 2);
          if (more == 2) {
            skip_quotes(2);
            in_ = c == '"' ? context::multi_basic : context::multi_literal;
          } else if (more == 0) {
            in_ = c == '"' ? context::basic : context::literal;
          } else {
            skip_quotes(1);  // an empty string
          }
        } else if (unclassifiable(c)) {
          return hazard(c, "outside a string or comment");
        }
        return std::nullopt;
      }
      case context::comment:
        if (c == '\n') {
          in_ = context::outside;
          last_outside_ = c;
        }
        return std::nullopt;
      case context::basic:
        if (c == '\\') {
          escaped_next();
        } else if (c == '"' || c == '\n') {
          in_ = context::outside;
          last_outside_ = c;
        }
        return std::nullopt;
      case context::literal:
        if (c == '\'' || c == '\n') {
          in_ = context::outside;
          last_outside_ = c;
        }
        return std::nullopt;
      case context::multi_basic:
        if (c == '\\') {
          if (at_ >= text_.size()) return std::nullopt;
          const auto escaped = next();
          if (!escaped) return std::nullopt;
          // toml++ asks whether the escaped code point is whitespace (a line-ending backslash).
          if (unclassifiable(*escaped)) return hazard(*escaped, "after a backslash");
          if (*escaped == ' ' || *escaped == '\t' || *escaped == '\n' || *escaped == '\r') {
            skipping_ = true;
          }
          return std::nullopt;
        }
        if (c == '"') close_multi('"');
        return std::nullopt;
      case context::multi_literal:
        if (c == '\'') close_multi('\'');
        return std::nullopt;
    }
    return std::nullopt;
  }
  // In a single-line basic string, the escaped code point is never tested for whitespace.
  void escaped_next() {
    if (at_ < text_.size()) next();
  }
  // `quote` was just read inside a multi-line string: three in a row end it, and up to two
  // more right after belong to its content (""""" is two quotes, then the end).
  void close_multi(char quote) {
    const auto more = run_of(quote, 4);
    if (more < 2) {
      skip_quotes(more);
      return;
    }
    skip_quotes(more);
    in_ = context::outside;
    last_outside_ = static_cast<char32_t>(quote);
  }

  std::string_view text_;
  std::size_t at_ = 0;
  std::size_t line_ = 1, column_ = 1;            // of the code point last read
  std::size_t next_line_ = 1, next_column_ = 1;  // of the one at the cursor
  // A quote starts a string for toml++ only where a key or a value may begin; elsewhere (as in
  // `x = 2"…`) toml++ goes on reading a bare token and tests what follows for whitespace.
  static bool opens_string_after(char32_t before) {
    return before == ' ' || before == '\t' || before == '\n' || before == '\r' || before == '=' ||
           before == '[' || before == '{' || before == ',' || before == '.';
  }

  context in_ = context::outside;
  char32_t last_outside_ = '\n';  // the code point before the current one, outside strings
  bool skipping_ = false;
};

}  // namespace

std::optional<toml_hazard> find_toml_hazard(std::string_view text) {
  return scanner(text).run();
}

}  // namespace tether::config
