// A request's place in its key's admission queue, by name: the vocabulary of a key's
// `max_priority` (the config checks it) and of the caller's X-Priority header (the gateway reads
// it). How a class orders the queue is actors/policy/admission/queue_priority.hpp's.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tether {

// Lower is served first within a key; the order between keys is the fair queue's.
enum class priority : std::uint8_t { high, normal, low };

// "high", "normal", "low".
std::string_view name_of(priority p);
// The class of that name, letter case ignored (a header's value may come in any case).
std::optional<priority> priority_named(std::string_view name);

}  // namespace tether
