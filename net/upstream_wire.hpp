// The head of one upstream request, in one buffer: the exchange writes it and the body (the
// request's shared buffer, not a copy) with one gathered send. Beast's serializer did the same
// work through its buffer-sequence machinery, the largest single cost of starting an exchange.
#pragma once

#include <string>
#include <string_view>

#include "net/upstream.hpp"

namespace tether::net {

// Whether a caller's header may be sent upstream. The session frames the message and owns the
// connection, so framing and hop-by-hop fields are its own (a caller's copy would contradict it or
// smuggle a second request); a name or value holding CR, LF or NUL could end the line early and
// inject headers of its own.
bool is_forwardable_header(std::string_view name, std::string_view value);

// HTTP/1.1 request head, up to and with its empty line: the caller's forwardable headers as
// given, then Host, Connection: keep-alive and, as Beast's prepare_payload would, Content-Length
// (of request.body) when there is a body or the method expects one (POST, PUT, OPTIONS). The body
// follows it on the wire.
std::string upstream_head(const upstream_request& request, std::string_view host_header);

}  // namespace tether::net
