// The character rules of HTTP/1.1 header text (RFC 9110 §5), without locale lookups: these run
// for every header of every request and response, where std::tolower and a find_first_of per
// character were a visible cost per request.
#pragma once

#include <string>
#include <string_view>

namespace tether::net {

constexpr char ascii_lower(char c) noexcept {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c + ('a' - 'A')) : c;
}

std::string to_lower_ascii(std::string_view s);
bool iequals_ascii(std::string_view a, std::string_view b) noexcept;

// A non-empty run of tchar: what a header name must be.
bool is_token(std::string_view s) noexcept;

// CR, LF or NUL: text that could end a header line early (response splitting, header injection).
bool has_line_break(std::string_view s) noexcept;

}  // namespace tether::net
