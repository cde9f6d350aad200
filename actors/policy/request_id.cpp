#include "actors/policy/request_id.hpp"

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
  // Per-thread generator seeded once: ids must be unique, not secret.
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char hex[] = "0123456789abcdef";
  std::string id;
  id.reserve(4 + 32);
  id = "req_";
  for (int word = 0; word < 2; ++word) {
    auto bits = rng();
    for (int i = 0; i < 16; ++i) {
      id.push_back(hex[bits & 0xf]);
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
