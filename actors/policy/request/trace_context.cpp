#include "actors/policy/request/trace_context.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <random>

namespace tether {
namespace {

constexpr std::size_t version_00_size = 55;  // 2 + 1 + 32 + 1 + 16 + 1 + 2

bool is_lower_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

bool is_lower_hex(std::string_view s) {
  for (char c : s) {
    if (!is_lower_hex(c)) return false;
  }
  return true;
}

bool is_all_zero(std::string_view s) {
  return s.find_first_not_of('0') == std::string_view::npos;
}

int hex_value(char c) {
  return c <= '9' ? c - '0' : c - 'a' + 10;
}

// Two hex digits for each byte value, so that a draw's 64 bits are written a byte at a time.
constexpr std::array<char, 512> hex_pairs = [] {
  constexpr char hex[] = "0123456789abcdef";
  std::array<char, 512> pairs{};
  for (std::size_t b = 0; b < 256; ++b) {
    pairs[2 * b] = hex[b >> 4];
    pairs[2 * b + 1] = hex[b & 0xf];
  }
  return pairs;
}();

// Per-thread generator seeded once: ids must be unique across the trace's systems, not secret.
// Written in place, 16 digits per draw (appending a digit at a time cost several times as much
// for a request's three ids).
void write_random_hex(char* id, std::size_t digits) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  do {
    for (std::size_t at = 0; at < digits; at += 16) {
      auto bits = rng();
      const std::size_t end = std::min(digits, at + 16);
      std::size_t i = at;
      for (; i + 2 <= end; i += 2, bits >>= 8)
        std::memcpy(id + i, &hex_pairs[2 * (bits & 0xff)], 2);
      if (i < end) id[i] = hex_pairs[2 * (bits & 0xf) + 1];
    }
    // The spec makes an all-zero id invalid; the odds are 2^-64, but a receiver would drop it.
  } while (is_all_zero({id, digits}));
}

}  // namespace

std::optional<trace_context> parse_traceparent(std::string_view header) {
  if (header.size() < version_00_size) return std::nullopt;
  const auto version = header.substr(0, 2);
  if (!is_lower_hex(version) || version == "ff") return std::nullopt;
  const bool is_version_00 = version == "00";
  // Version 00 has nothing after the flags; a later version may append fields after a dash.
  if (is_version_00 && header.size() != version_00_size) return std::nullopt;
  if (!is_version_00 && header.size() > version_00_size && header[version_00_size] != '-')
    return std::nullopt;
  if (header[2] != '-' || header[35] != '-' || header[52] != '-') return std::nullopt;

  const auto trace_id = header.substr(3, 32);
  const auto span_id = header.substr(36, 16);
  const auto flags = header.substr(53, 2);
  if (!is_lower_hex(trace_id) || !is_lower_hex(span_id) || !is_lower_hex(flags))
    return std::nullopt;
  if (is_all_zero(trace_id) || is_all_zero(span_id)) return std::nullopt;

  trace_context context;
  context.trace_id = std::string(trace_id);
  context.span_id = std::string(span_id);
  context.flags = static_cast<std::uint8_t>(hex_value(flags[0]) * 16 + hex_value(flags[1]));
  // Of a version we do not know, only the sampled bit has a meaning we can vouch for.
  if (!is_version_00) context.flags &= 0x01;
  return context;
}

std::string format_traceparent(std::string_view trace_id, std::string_view span_id,
                               std::uint8_t flags) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(version_00_size);
  out += "00-";
  out += trace_id;
  out += '-';
  out += span_id;
  out += '-';
  out.push_back(hex[flags >> 4]);
  out.push_back(hex[flags & 0xf]);
  return out;
}

std::string format_traceparent(const trace_context& context) {
  return format_traceparent(context.trace_id, context.span_id, context.flags);
}

std::string new_trace_id() {
  std::string id(32, '0');
  write_random_hex(id.data(), id.size());
  return id;
}

span_id_digits new_span_id_digits() {
  span_id_digits id{};
  write_random_hex(id.data(), id.size());
  return id;
}

std::string new_span_id() {
  const auto id = new_span_id_digits();
  return {id.data(), id.size()};
}

}  // namespace tether
