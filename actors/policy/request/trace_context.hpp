// W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` header a request's
// SERVER span joins and each attempt's CLIENT span sends upstream (issue #5).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tether {

struct trace_context {
  std::string trace_id;    // 32 lower-case hex digits, not all zero
  std::string span_id;     // 16 lower-case hex digits, not all zero (the parent-id of the header)
  std::uint8_t flags = 1;  // bit 0: sampled
};

// Strict per the spec: version 00 is exactly `00-<32 hex>-<16 hex>-<2 hex>`, lower case only,
// no all-zero ids. A higher version is parsed by its version-00 prefix when what follows the
// flags is the end or a dash, and only its sampled bit is kept; version ff is invalid.
// nullopt means "start a new trace", never an error for the caller.
std::optional<trace_context> parse_traceparent(std::string_view header);

// Always version 00.
std::string format_traceparent(const trace_context& context);
std::string format_traceparent(std::string_view trace_id, std::string_view span_id,
                               std::uint8_t flags);

// Random, lower-case hex, never all zero.
std::string new_trace_id();
std::string new_span_id();
// A span id without a string of its own (16 digits are one more than a std::string holds
// without allocating): what an attempt's traceparent needs when no span is exported.
using span_id_digits = std::array<char, 16>;
span_id_digits new_span_id_digits();

}  // namespace tether
