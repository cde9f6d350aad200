// The fields of one whole SSE event as an upstream framed it: what the stream assembly reads of
// every event, and the answer's end of the rare event its first line does not decide.
#pragma once

#include <string>
#include <string_view>

namespace tether {

// An SSE event's name and its data lines joined by "\n".
struct sse_event {
  std::string_view name;  // a view into the text read
  std::string data;
  bool has_data = false;
};

// Comments and fields other than `event` and `data` are skipped; a value's one leading space is
// dropped; "\r\n", "\r" and "\n" each end a line.
sse_event parse_event(std::string_view text);

}  // namespace tether
