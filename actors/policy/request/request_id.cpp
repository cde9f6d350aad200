#include "actors/policy/request/request_id.hpp"

#include <array>
#include <random>

namespace tether {

bool is_sane_request_id(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string generate_request_id() {
  // Per-thread generator seeded once: ids must be unique, not secret. Written in place, 16
  // digits per draw (appending a digit at a time cost several times as much).
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char hex[] = "0123456789abcdef";
  std::string id("req_00000000000000000000000000000000");
  for (std::size_t at = 4; at < id.size(); at += 16) {
    auto bits = rng();
    for (std::size_t i = at; i < at + 16; ++i) {
      id[i] = hex[bits & 0xf];
      bits >>= 4;
    }
  }
  return id;
}

std::string accept_or_generate_request_id(const std::string* header_value) {
  if (header_value != nullptr && is_sane_request_id(*header_value)) return *header_value;
  return generate_request_id();
}

}  // namespace tether
