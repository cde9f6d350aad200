#include "net/http_types.hpp"

#include "net/header_text.hpp"

namespace tether::net {

const std::string* find_header(const header_list& headers, std::string_view name) {
  // The length first, here: most names differ in it, and a real caller's head has many fields.
  for (const auto& header : headers) {
    if (header.name.size() == name.size() && iequals_ascii(header.name, name)) return &header.value;
  }
  return nullptr;
}

}  // namespace tether::net
