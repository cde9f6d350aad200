#include "net/sse_framer.hpp"

#include <cstring>
#include <utility>

namespace tether::net {

sse_framer::sse_framer(std::size_t max_event_bytes) : max_event_bytes_(max_event_bytes) {}

// SSE lines end in "\r\n", "\n" or "\r" (WHATWG HTML, "Parsing an event stream"); an event ends
// at an empty line. A "\r" that ends an empty line is ambiguous while it is the last byte we
// have: if a "\n" follows, it belongs to the same terminator and so to this event. Emitting
// early would leave that "\n" to open the next event as a spurious empty line, so such an event
// is held until the next byte (or finish()) decides.
sse_events sse_framer::feed(std::string bytes) {
  sse_events out;
  if (overflowed_) return out;
  // The buffer always starts at an event's start. Empty, it takes the bytes over uncopied.
  if (buffer_.empty()) {
    buffer_.swap(bytes);
  } else {
    buffer_.append(bytes);
  }

  std::size_t event_start = 0;
  auto emit = [&](std::size_t end) {
    if (end - event_start > max_event_bytes_) {
      overflowed_ = true;
      return;
    }
    if (event_start > 0) out.ends.push_back(event_start);
    event_start = end;
    at_line_start_ = true;
    pending_cr_ = false;
  };

  std::size_t i = scan_pos_;
  while (i < buffer_.size() && !overflowed_) {
    const char c = buffer_[i];
    if (pending_cr_) {
      pending_cr_ = false;
      if (c == '\n') {  // second half of a "\r\n" that ended a non-blank line
        ++i;
        continue;
      }
    }
    if (c == '\n') {
      if (at_line_start_) {
        emit(i + 1);
      } else {
        at_line_start_ = true;
      }
      ++i;
    } else if (c == '\r') {
      if (at_line_start_) {
        if (i + 1 == buffer_.size()) break;  // held: "\r" or "\r\n" — the next byte decides
        const std::size_t end = buffer_[i + 1] == '\n' ? i + 2 : i + 1;
        emit(end);
        i = end;
      } else {
        at_line_start_ = true;
        pending_cr_ = true;
        ++i;
      }
    } else {
      // An ordinary byte, and every one up to the next line terminator, only says the line is not
      // blank: skip to that terminator with memchr instead of a byte at a time (a stream's every
      // event passes through here).
      at_line_start_ = false;
      const char* base = buffer_.data();
      const std::size_t rest = buffer_.size() - i - 1;
      const auto* lf = static_cast<const char*>(std::memchr(base + i + 1, '\n', rest));
      const char* stop = lf != nullptr ? lf : base + buffer_.size();
      const auto* cr = static_cast<const char*>(
          std::memchr(base + i + 1, '\r', static_cast<std::size_t>(stop - (base + i + 1))));
      i = static_cast<std::size_t>((cr != nullptr ? cr : stop) - base);
    }
  }

  if (!overflowed_ && buffer_.size() - event_start > max_event_bytes_) overflowed_ = true;
  if (overflowed_) {
    if (event_start > 0) out.text.assign(buffer_, 0, event_start);
    std::string().swap(buffer_);
    scan_pos_ = 0;
    return out;
  }
  scan_pos_ = i - event_start;
  if (event_start == 0) return out;
  if (event_start == buffer_.size()) {
    out.text.swap(buffer_);  // whole events only, the usual read: handed on as they came
  } else if (event_start >= buffer_.size() - event_start) {
    // The unfinished tail is the smaller part: it is the one copied.
    std::string tail(buffer_, event_start);
    buffer_.resize(event_start);
    out.text.swap(buffer_);
    buffer_.swap(tail);
  } else {
    out.text.assign(buffer_, 0, event_start);
    buffer_.erase(0, event_start);
  }
  return out;
}

sse_events sse_framer::finish() {
  sse_events out;
  // Only the held case is complete: scanning stopped on a final "\r" that ends an empty line.
  const bool held = !overflowed_ && !buffer_.empty() && scan_pos_ + 1 == buffer_.size() &&
                    buffer_.back() == '\r' && at_line_start_ && !pending_cr_;
  if (held) {
    out.text.swap(buffer_);
    scan_pos_ = 0;
    at_line_start_ = true;
  }
  return out;
}

namespace {

// Splits SSE text into lines at "\r\n", "\n" or "\r"; calls f(line) for each.
template <class F>
void for_each_line(std::string_view text, F&& f) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find_first_of("\r\n", pos);
    if (end == std::string_view::npos) {
      f(text.substr(pos));
      return;
    }
    f(text.substr(pos, end - pos));
    pos = (text[end] == '\r' && end + 1 < text.size() && text[end + 1] == '\n') ? end + 2 : end + 1;
  }
}

}  // namespace

bool sse_framer::is_done_event(std::string_view event) {
  std::string data;
  bool has_data = false;
  for_each_line(event, [&](std::string_view line) {
    if (line.empty() || line.front() == ':') return;  // blank line or comment
    const std::size_t colon = line.find(':');
    if (line.substr(0, colon) != "data") return;
    std::string_view value = colon == std::string_view::npos ? "" : line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (has_data) data += '\n';
    data.append(value);
    has_data = true;
  });
  return has_data && data == "[DONE]";
}

std::string make_error_event(std::string_view json, std::string_view name) {
  std::string event;
  event.reserve(json.size() + name.size() + 16);
  if (!name.empty()) event.append("event: ").append(name).append("\n");
  const auto head = event.size();
  // JSON may carry raw line breaks as whitespace between tokens; each becomes its own data line
  // so the event is not cut short and its data still parses as the same JSON.
  for_each_line(json, [&](std::string_view line) {
    event += "data: ";
    event.append(line);
    event += '\n';
  });
  if (event.size() == head) event += "data: \n";
  event += '\n';
  return event;
}

}  // namespace tether::net
