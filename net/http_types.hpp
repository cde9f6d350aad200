// Plain HTTP values shared by net/ and the actors: no Beast or Asio types cross this line.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace tether::net {

struct http_header {
  std::string name;  // lower-case
  std::string value;
};
using header_list = std::vector<http_header>;

// First value of a header (name compared case-insensitively), or nullptr.
const std::string* find_header(const header_list& headers, std::string_view name);

}  // namespace tether::net
