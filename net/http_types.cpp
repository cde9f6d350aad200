#include "net/http_types.hpp"

#include "net/header_text.hpp"

namespace tether::net {

const std::string* find_header(const header_list& headers, std::string_view name) {
  for (const auto& header : headers) {
    if (iequals_ascii(header.name, name)) return &header.value;
  }
  return nullptr;
}

}  // namespace tether::net
