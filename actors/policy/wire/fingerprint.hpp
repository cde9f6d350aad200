// A 64-bit fingerprint of a sequence of byte strings and tags, computed as they come (a request
// body's parts while it is parsed, the parts of a call's identity): eight bytes per step, in the
// manner of MurmurHash64A. It tells a client's repeated call from a different one, not an
// adversary's forgery from the real thing: a caller able to make two of its own bodies collide
// only shortens its own call's deadline (the call table keys every entry by the caller too).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace tether {

class fingerprint {
 public:
  // Each string is mixed with its length first: ("ab", "c") and ("a", "bc") differ.
  void add(std::string_view bytes) {
    mix(bytes.size());
    const char* p = bytes.data();
    std::size_t n = bytes.size();
    for (; n >= 8; p += 8, n -= 8) {
      std::uint64_t k;
      std::memcpy(&k, p, 8);
      mix(k);
    }
    if (n > 0) {
      std::uint64_t k = 0;
      std::memcpy(&k, p, n);
      mix(k);
    }
  }
  // A marker between the parts (a structure's punctuation, a kind of value) or a number.
  void tag(std::uint64_t t) { mix(t ^ tag_bit); }

  std::uint64_t value() const {
    std::uint64_t h = h_;
    h ^= h >> 47;
    h *= m;
    h ^= h >> 47;
    return h;
  }

 private:
  static constexpr std::uint64_t m = 0xc6a4a7935bd1e995ULL;
  // Keeps a tag apart from a string's length of the same value.
  static constexpr std::uint64_t tag_bit = 0x8000000000000000ULL;

  void mix(std::uint64_t k) {
    k *= m;
    k ^= k >> 47;
    k *= m;
    h_ ^= k;
    h_ *= m;
  }

  std::uint64_t h_ = 0x9e3779b97f4a7c15ULL;
};

}  // namespace tether
