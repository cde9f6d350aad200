// Cuts a text/event-stream body into whole events, so the gateway relays upstream SSE only in
// complete events and can end a stream between two of them (never inside one). Pure: no sockets,
// no Beast; fed whatever byte slices the transport delivers.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tether::net {

// The whole events one feed completed, back to back in one string, each with the blank line that
// ends it: relayed as one piece, and taken over uncopied when a read held whole events only.
// `ends` marks where each event but the last ends; for the usual single event it is empty and
// holds no allocation.
struct sse_events {
  std::string text;
  std::vector<std::size_t> ends;

  bool empty() const { return text.empty(); }
  std::size_t size() const { return text.empty() ? 0 : ends.size() + 1; }
  std::string_view operator[](std::size_t i) const {
    const std::size_t from = i == 0 ? 0 : ends[i - 1];
    const std::size_t to = i < ends.size() ? ends[i] : text.size();
    return std::string_view(text).substr(from, to - from);
  }
};

class sse_framer {
 public:
  // Bounds the memory one event may take. An upstream that never sends a blank line would
  // otherwise grow the buffer without limit.
  static constexpr std::size_t default_max_event_bytes = 1024 * 1024;

  explicit sse_framer(std::size_t max_event_bytes = default_max_event_bytes);

  // Appends `bytes` and returns every event completed by them, each as its raw bytes including
  // the blank line that ends it (ready to relay unchanged). Events come out the same whatever
  // the chunking. An event (or unfinished tail) longer than the limit sets overflowed(): the
  // events completed before it are still returned, the buffer is released, and every later feed
  // returns nothing — the caller should end the stream.
  sse_events feed(std::string bytes);

  // At the end of the body: returns the buffered event when it is complete but was held back
  // only because its final "\r" might have been the first half of a "\r\n". A genuinely
  // unfinished tail stays buffered (has_partial() remains true).
  sse_events finish();

  // True while bytes of an unfinished event are buffered.
  bool has_partial() const { return !buffer_.empty(); }
  std::size_t buffered() const { return buffer_.size(); }
  bool overflowed() const { return overflowed_; }
  std::size_t max_event_bytes() const { return max_event_bytes_; }

  // True when the event's data (its data lines joined) is exactly "[DONE]", the OpenAI
  // end-of-stream marker.
  static bool is_done_event(std::string_view event);

 private:
  std::string buffer_;
  std::size_t scan_pos_ = 0;   // bytes before this were scanned (state below describes them)
  bool at_line_start_ = true;  // the scanned bytes end with a line terminator (or are empty)
  bool pending_cr_ = false;    // the last scanned byte was a "\r" ending a non-blank line
  bool overflowed_ = false;
  std::size_t max_event_bytes_;
};

// A complete SSE event carrying `json` as its data: "data: <json>\n\n", preceded by
// "event: <name>\n" when `name` is not empty. A newline inside `json` starts another data line,
// so the event stays one event and its data stays `json`.
std::string make_error_event(std::string_view json, std::string_view name = {});

}  // namespace tether::net
