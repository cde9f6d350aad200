// Feeds what a buffer already holds to a Beast parser, synchronously: what Beast's composed
// reads do before they read, without their completion posted through the io queue (a queue trip
// and its instructions saved per request). net/-internal: it exposes Beast.
#pragma once

#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>
#include <cstddef>

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

}  // namespace tether::net
