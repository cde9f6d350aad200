#include "config/priority.hpp"

#include <array>
#include <cctype>

namespace tether {
namespace {

constexpr std::array<std::string_view, 3> names{"high", "normal", "low"};

bool same_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != b[i]) return false;
  }
  return true;
}

}  // namespace

std::string_view name_of(priority p) {
  return names[static_cast<std::size_t>(p)];
}

std::optional<priority> priority_named(std::string_view name) {
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (same_ignoring_case(name, names[i])) return static_cast<priority>(i);
  }
  return std::nullopt;
}

}  // namespace tether
