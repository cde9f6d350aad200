#include "net/upstream_wire.hpp"

#include <array>
#include <charconv>

#include "net/header_text.hpp"

namespace tether::net {

namespace {

// Compared only with the names of its length (nine comparisons a header were a visible cost
// per request).
bool is_connection_level(std::string_view name) {
  switch (name.size()) {
    case 2:
      return iequals_ascii(name, "te");
    case 4:
      return iequals_ascii(name, "host");
    case 7:
      return iequals_ascii(name, "trailer") || iequals_ascii(name, "upgrade");
    case 10:
      return iequals_ascii(name, "connection") || iequals_ascii(name, "keep-alive");
    case 14:
      return iequals_ascii(name, "content-length");
    case 16:
      return iequals_ascii(name, "proxy-connection");
    case 17:
      return iequals_ascii(name, "transfer-encoding");
    default:
      return false;
  }
}

bool expects_body(std::string_view method) {
  return method == "POST" || method == "PUT" || method == "OPTIONS";
}

}  // namespace

bool is_forwardable_header(std::string_view name, std::string_view value) {
  return !is_connection_level(name) && !has_line_break(name) && !has_line_break(value);
}

std::string upstream_head(const upstream_request& request, std::string_view host_header) {
  std::size_t size = request.method.size() + request.target.size() + host_header.size() + 96;
  for (const auto& h : request.headers) size += h.name.size() + h.value.size() + 4;
  std::string out;
  out.reserve(size);
  out.append(request.method).append(" ").append(request.target).append(" HTTP/1.1\r\n");
  for (const auto& h : request.headers) {
    if (!is_forwardable_header(h.name, h.value)) continue;
    out.append(h.name).append(": ").append(h.value).append("\r\n");
  }
  out.append("Host: ").append(host_header).append("\r\nConnection: keep-alive\r\n");
  if (!request.body.empty() || expects_body(request.method)) {
    std::array<char, 24> digits{};
    auto length = std::to_chars(digits.data(), digits.data() + digits.size(), request.body.size());
    out.append("Content-Length: ").append(digits.data(), length.ptr).append("\r\n");
  }
  out.append("\r\n");
  return out;
}

}  // namespace tether::net
