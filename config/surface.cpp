#include "config/surface.hpp"

#include <array>

namespace tether {
namespace {

struct surface_names {
  std::string_view name;
  std::string_view path;
};
constexpr std::array<surface_names, surface_count> table{{
    {"chat", "/v1/chat/completions"},
    {"completions", "/v1/completions"},
    {"embeddings", "/v1/embeddings"},
    {"responses", "/v1/responses"},
    {"messages", "/v1/messages"},
    {"count_tokens", "/v1/messages/count_tokens"},
}};

}  // namespace

std::string_view name_of(surface s) {
  return table[static_cast<std::size_t>(s)].name;
}

std::string_view path_of(surface s) {
  return table[static_cast<std::size_t>(s)].path;
}

std::optional<surface> surface_named(std::string_view name) {
  for (std::size_t i = 0; i < table.size(); ++i) {
    if (table[i].name == name) return static_cast<surface>(i);
  }
  return std::nullopt;
}

std::string names_of(surface_set set) {
  std::string out;
  for (std::size_t i = 0; i < table.size(); ++i) {
    if (!serves(set, static_cast<surface>(i))) continue;
    if (!out.empty()) out += ", ";
    out += table[i].name;
  }
  return out;
}

}  // namespace tether
