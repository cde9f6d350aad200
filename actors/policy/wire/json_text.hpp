// JSON text written directly into a string, for the lines and bodies tether writes on every
// request (the access log, error bodies): a boost::json DOM and fmt cost many times what this
// does per access line.
#pragma once

#include <string>
#include <string_view>

namespace tether {

// `text` as a JSON string, quotes included, escaped as boost::json::serialize does: quote,
// backslash and control characters; everything else (UTF-8 included) as it is.
void append_json_string(std::string& out, std::string_view text);

// `v` with exactly three decimals, correctly rounded, as printf's "%.3f" (1.5 → "1.500").
void append_decimal_3(std::string& out, double v);

// `v` in decimal.
void append_integer(std::string& out, long long v);

// The same, written at `out`, which has room for the most each can write (below); each returns
// the end of what it wrote. For a line assembled in one buffer sized once (the access line), where
// a string's append per piece cost more than the text itself.
constexpr std::size_t json_string_max(std::size_t text_size) {
  return 2 + 6 * text_size;  // quotes; a control character becomes \u00XX
}
inline constexpr std::size_t json_number_max = 64;
char* write_json_string(char* out, std::string_view text);
char* write_decimal_3(char* out, double v);
char* write_integer(char* out, long long v);

}  // namespace tether
