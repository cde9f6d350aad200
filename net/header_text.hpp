// The character rules of HTTP/1.1 header text (RFC 9110 §5), without locale lookups: these run
// for every header of every request and response, where std::tolower and a find_first_of per
// character were a visible cost per request.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

namespace tether::net {

constexpr char ascii_lower(char c) noexcept {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c + ('a' - 'A')) : c;
}

// tchar (RFC 9110 §5.6.2): what a header name is made of.
constexpr bool is_tchar(char c) noexcept {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// The same as a table, by byte: one lookup a character where whole names are checked.
inline constexpr std::array<bool, 256> tchar_table = [] {
  std::array<bool, 256> t{};
  for (std::size_t c = 0; c < t.size(); ++c) t[c] = is_tchar(static_cast<char>(c));
  return t;
}();

std::string to_lower_ascii(std::string_view s);
bool iequals_ascii(std::string_view a, std::string_view b) noexcept;

// A non-empty run of tchar: what a header name must be.
bool is_token(std::string_view s) noexcept;

// CR, LF or NUL: text that could end a header line early (response splitting, header injection).
bool has_line_break(std::string_view s) noexcept;

}  // namespace tether::net
