// What tether's two parsers share: Beast's basic_parser keeping the head's fields as tether hands
// them on (a header_list, lower-case names, wire order), and taking a head that scan_head read
// whole (net/head_scan.hpp), of which Beast then parses only the start line and framing fields.
// net/-internal: it exposes Beast.
#pragma once

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <cstdint>
#include <utility>

#include "net/head_scan.hpp"
#include "net/http_types.hpp"

namespace tether::net {

template <bool is_request>
class scanning_parser : public boost::beast::http::basic_parser<is_request> {
 public:
  // Valid once the head is done (is_header_done()).
  header_list& headers() { return headers_; }

  // Beast's header limit, remembered for scan_head (put_scanned_head in net/buffered_parse.hpp):
  // Beast keeps it to itself.
  void limit_head(std::uint32_t bytes) {
    head_limit_ = bytes;
    this->header_limit(bytes);
  }
  std::uint32_t head_limit() const { return head_limit_; }

  // A head scan_head read whole: Beast parses its start line and framing fields, the fields are
  // taken as read.
  void put_scanned(scanned_head& head, boost::beast::error_code& ec) {
    scanned_ = true;
    this->put(boost::asio::const_buffer(head.for_beast.data(), head.for_beast.size()), ec);
    scanned_ = false;
    headers_ = std::move(head.fields);
  }

 protected:
  // While Beast parses a scanned head's lines: its fields are kept already, and bring their own
  // room.
  bool scanning() const { return scanned_; }

  header_list headers_;

 private:
  std::uint32_t head_limit_ = 8 * 1024;  // Beast's default
  bool scanned_ = false;
};

}  // namespace tether::net
