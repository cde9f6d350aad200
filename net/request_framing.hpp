// The framing checks a request's head must pass before its body is read: what Beast's parser
// accepts but tether refuses. downstream_session applies them after the head; the HTTP request
// fuzzer (tests/fuzz/http_request_fuzz.cpp) calls the same function instead of a copy of it.
#pragma once

#include <cstddef>

#include "net/downstream_request_parser.hpp"

namespace tether::net {

enum class framing_fault {
  none,
  too_many_fields,           // more header fields than server.max_header_fields (431)
  duplicate_content_length,  // request-smuggling material, refused outright (400)
  length_and_encoding,       // Content-Length next to Transfer-Encoding (400)
  not_chunked,               // Transfer-Encoding whose last coding is not chunked (400)
};

// Valid once the parser's head is done. Beast accepts repeated equal Content-Lengths and a
// non-chunked Transfer-Encoding next to a Content-Length.
inline framing_fault check_request_framing(downstream_request_parser& parser,
                                           std::size_t max_header_fields) {
  if (parser.headers().size() > max_header_fields) return framing_fault::too_many_fields;
  const auto lengths = parser.content_lengths();
  const auto encodings = parser.transfer_encodings();
  if (lengths > 1) return framing_fault::duplicate_content_length;
  if (lengths > 0 && encodings > 0) return framing_fault::length_and_encoding;
  if (encodings > 0 && !parser.chunked()) return framing_fault::not_chunked;
  return framing_fault::none;
}

}  // namespace tether::net
