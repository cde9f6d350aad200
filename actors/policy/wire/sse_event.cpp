#include "actors/policy/wire/sse_event.hpp"

namespace tether {

sse_event parse_event(std::string_view text) {
  sse_event e;
  while (!text.empty()) {
    const auto end = text.find_first_of("\r\n");
    auto line = text.substr(0, end);
    if (end == std::string_view::npos) {
      text = {};
    } else {
      // "\r\n" is one line end.
      const auto next =
          end + 1 < text.size() && text[end] == '\r' && text[end + 1] == '\n' ? end + 2 : end + 1;
      text.remove_prefix(next);
    }
    if (line.empty() || line.front() == ':') continue;
    const auto colon = line.find(':');
    const auto field = line.substr(0, colon);
    auto value = colon == std::string_view::npos ? std::string_view{} : line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (field == "event") {
      e.name = value;
    } else if (field == "data") {
      if (e.has_data) e.data += '\n';
      e.data.append(value);
      e.has_data = true;
    }
  }
  return e;
}

}  // namespace tether
