// The parser of an upstream's response: Beast's basic_parser, keeping the head as tether passes
// it on (a header_list with lower-case names) and writing the body into the caller's buffer as
// Beast's buffer_body does. Beast's response_parser<buffer_body> kept the head in basic_fields,
// which allocates an element per header field, only for upstream_session to
// copy them into a header_list. net/-internal: it exposes Beast.
#pragma once

#include <algorithm>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "net/header_text.hpp"
#include "net/http_types.hpp"
#include "net/scanning_parser.hpp"

namespace tether::net {

class upstream_response_parser final : public scanning_parser<false> {
 public:
  // Where the body goes next: `data` advances and `size` shrinks as bytes are written; with
  // `data` null, or `size` spent, parsing stops with need_buffer (as with Beast's buffer_body).
  struct body_space {
    char* data = nullptr;
    std::size_t size = 0;
  };

  // Valid once the head is done (is_header_done()).
  int status() const { return status_; }
  int version() const { return version_; }  // 10 or 11
  body_space& body() { return body_; }

 private:
  using error_code = boost::beast::error_code;
  using string_view = boost::beast::string_view;

  // Only ever called for requests.
  void on_request_impl(boost::beast::http::verb, string_view, string_view, int,
                       error_code& ec) override {
    ec = boost::beast::http::error::bad_method;
  }
  void on_response_impl(int code, string_view, int version, error_code&) override {
    status_ = code;
    version_ = version;
    // One allocation for a usual response's fields, not one per doubling. A scanned head brings
    // its own.
    if (!scanning()) headers_.reserve(8);
  }
  void on_field_impl(boost::beast::http::field, string_view name, string_view value,
                     error_code&) override {
    if (scanning()) return;  // the framing fields of a scanned head: kept already
    headers_.push_back(
        {to_lower_ascii({name.data(), name.size()}), std::string(value.data(), value.size())});
  }
  void on_header_impl(error_code&) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
  std::size_t on_body_impl(string_view bytes, error_code& ec) override {
    return write_body(bytes, ec);
  }
  void on_chunk_header_impl(std::uint64_t, string_view, error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, string_view bytes, error_code& ec) override {
    return write_body(bytes, ec);
  }
  void on_finish_impl(error_code&) override {}

  std::size_t write_body(string_view bytes, error_code& ec) {
    if (body_.data == nullptr) {
      ec = boost::beast::http::error::need_buffer;
      return 0;
    }
    const std::size_t n = std::min(bytes.size(), body_.size);
    if (n > 0) std::memcpy(body_.data, bytes.data(), n);
    body_.data += n;
    body_.size -= n;
    if (n < bytes.size()) ec = boost::beast::http::error::need_buffer;
    return n;
  }

  int status_ = 0;
  int version_ = 0;
  body_space body_;
};

}  // namespace tether::net
