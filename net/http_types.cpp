#include "net/http_types.hpp"

#include <algorithm>
#include <cctype>

namespace tether::net {

namespace {

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

const std::string* find_header(const header_list& headers, std::string_view name) {
  for (const auto& header : headers) {
    if (equals_ignoring_case(header.name, name)) return &header.value;
  }
  return nullptr;
}

}  // namespace tether::net
