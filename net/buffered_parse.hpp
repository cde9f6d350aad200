// Feeds what a buffer already holds to a Beast parser, synchronously: what Beast's composed
// reads do before they read, without their completion posted through the io queue (a queue trip
// and its instructions saved per request). net/-internal: it exposes Beast.
#pragma once

#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>
#include <cstddef>
#include <optional>
#include <string_view>

#include "net/head_scan.hpp"

namespace tether::net {

// Stops when the buffer is spent, the message is done, the parser needs more bytes or more body
// space (need_more / need_buffer: not errors here, `ec` stays clear), or, for a parser that is
// not eager and had no head yet, at the end of the head. Returns the bytes consumed; `ec` is set
// only on a real error (the parser enforces its header and body limits itself).
template <bool is_request>
std::size_t put_buffered(boost::beast::http::basic_parser<is_request>& parser,
                         boost::beast::flat_buffer& buffer, boost::beast::error_code& ec) {
  namespace http = boost::beast::http;
  const bool had_head = parser.is_header_done();
  std::size_t consumed = 0;
  while (buffer.size() > 0 && !parser.is_done()) {
    const auto used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    consumed += used;
    // Compared only when set: each comparison with a Beast error builds a code of its category.
    if (ec) {
      if (ec == http::error::need_more || ec == http::error::need_buffer) ec = {};
      break;
    }
    if (used == 0) break;
    if (!had_head && !parser.eager() && parser.is_header_done()) break;
  }
  return consumed;
}

// A parser's head, when the bytes hold all of it and the parser has seen none: read by
// scan_head, Beast given only what it acts on (net/head_scan.hpp). Returns the head's bytes, or
// nullopt when it is Beast's to parse as ever (part of a head, or an unusual one).
template <class Parser>
std::optional<std::size_t> put_scanned_head(Parser& parser, std::string_view bytes,
                                            boost::beast::error_code& ec) {
  if (parser.got_some()) return std::nullopt;
  // Reused: the start line and framing fields are copied here for every head.
  static thread_local scanned_head head;
  if (scan_head(bytes, parser.head_limit(), Parser::is_request::value, head) != head_scan::scanned)
    return std::nullopt;
  parser.put_scanned(head, ec);
  if (ec && ec == boost::beast::http::error::need_more) ec = {};
  return head.size;
}

// As put_buffered, a whole head in the buffer read by put_scanned_head.
template <class Parser>
std::size_t put_head_buffered(Parser& parser, boost::beast::flat_buffer& buffer,
                              boost::beast::error_code& ec) {
  const std::string_view bytes{static_cast<const char*>(buffer.data().data()), buffer.size()};
  if (const auto used = put_scanned_head(parser, bytes, ec)) {
    buffer.consume(*used);
    return *used;
  }
  return put_buffered(parser, buffer, ec);
}

}  // namespace tether::net
