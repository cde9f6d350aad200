// JSON text written directly into a string, for the lines and bodies tether writes on every
// request (the access log, error bodies): a boost::json DOM and fmt cost ≈20k instructions per
// access line (callgrind), this a fraction.
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

}  // namespace tether
