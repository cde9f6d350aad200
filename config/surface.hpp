// The model APIs a caller may speak to the gateway, by name: the vocabulary an upstream's
// `surfaces` list is written in, shared by the config (which checks it) and the router (which
// routes by it). What differs between surfaces at run time is actors/policy/wire/surface.hpp's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tether {

enum class surface : std::uint8_t {
  chat,
  completions,
  embeddings,
  responses,
  messages,
  count_tokens
};
inline constexpr std::size_t surface_count = 6;

// A set of surfaces, one bit each.
using surface_set = std::uint8_t;
constexpr surface_set bit_of(surface s) {
  return static_cast<surface_set>(1U << static_cast<unsigned>(s));
}
constexpr bool serves(surface_set set, surface s) {
  return (set & bit_of(s)) != 0;
}

// "chat", "completions", "embeddings", "responses", "messages", "count_tokens".
std::string_view name_of(surface s);
std::optional<surface> surface_named(std::string_view name);
// The path a surface is served at ("/v1/chat/completions", ..., "/v1/messages/count_tokens").
std::string_view path_of(surface s);
// The names in `set`, in enum order, joined by ", ".
std::string names_of(surface_set set);

}  // namespace tether
