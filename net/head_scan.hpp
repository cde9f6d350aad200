// A message head read in one pass over bytes that hold all of it: the fields as tether keeps them
// (lower-case names, wire order), and the few lines Beast's parser acts on. Beast's own field
// parse is costly per field, and a real caller's or upstream's head has a good many; Beast is then
// given only the start line and the fields that frame the message, and still makes every framing
// decision itself. Anything out of the ordinary is left to Beast whole, so that what it accepts,
// rejects and reports stays exactly as before.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "net/http_types.hpp"

namespace tether::net {

struct scanned_head {
  std::size_t size = 0;   // the head's bytes, its closing empty line included
  std::string for_beast;  // the start line, the framing fields verbatim, and the empty line
  header_list fields;     // every field, lower-case names, in wire order
};

enum class head_scan {
  scanned,    // `out` holds the head
  need_more,  // no empty line yet, and room for more below `limit`
  unusual,    // for Beast to parse: too long, obs-fold, a control character, a malformed line
};

// The fields Beast acts on: Connection, Proxy-Connection, Content-Length, Transfer-Encoding and
// Upgrade (name in lower case).
bool frames_message(std::string_view lower_name) noexcept;

// Reads the head at the start of `bytes`, at most `limit` bytes long (Beast's header limit), a
// request's or a response's.
head_scan scan_head(std::string_view bytes, std::size_t limit, bool request, scanned_head& out);

}  // namespace tether::net
