#include "actors/policy/wire/answer_end.hpp"

#include <array>
#include <boost/json.hpp>
#include <string>

namespace tether {
namespace {

constexpr std::array<std::string_view, 3> responses_ends{"response.completed",
                                                         "response.incomplete", "response.failed"};

// Padded to one shape with the Responses API's three, so the helpers take either.
constexpr std::array<std::string_view, 3> messages_ends{"message_stop", "message_stop",
                                                        "message_stop"};

const std::array<std::string_view, 3>& ends_of(surface s) {
  return s == surface::responses ? responses_ends : messages_ends;
}

bool one_of(std::string_view name, const std::array<std::string_view, 3>& names) {
  for (auto n : names) {
    if (name == n) return true;
  }
  return false;
}

bool mentions_one_of(std::string_view text, const std::array<std::string_view, 3>& names) {
  for (auto n : names) {
    if (text.find(n) != std::string_view::npos) return true;
  }
  return false;
}

// The value of a field's line, `name:` and its one leading space dropped.
std::string_view value_after(std::string_view line, std::size_t name_length) {
  auto value = line.substr(name_length + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  return value;
}

// One data line (every event of the streams tether relays) is viewed in place; only an event
// of several is joined into `joined`.
struct event_fields {
  std::string_view name;
  std::string_view data;
  std::string joined;
  bool has_data = false;
};

// The `event:` and `data:` fields of one SSE event (several data lines join with '\n'). Filled in
// place: `data` may view `joined`, which a returned copy would move.
void read_fields(std::string_view event, event_fields& f) {
  std::size_t pos = 0;
  while (pos < event.size()) {
    std::size_t end = event.find_first_of("\r\n", pos);
    if (end == std::string_view::npos) end = event.size();
    const auto line = event.substr(pos, end - pos);
    pos = end + (event.substr(end, 2) == "\r\n" ? 2 : 1);
    if (line.empty() || line.front() == ':') continue;
    const auto colon = line.find(':');
    const auto field = line.substr(0, colon);
    const auto value =
        colon == std::string_view::npos ? std::string_view{} : value_after(line, field.size());
    if (field == "event") {
      f.name = value;
    } else if (field == "data") {
      if (f.has_data) {
        if (f.joined.empty()) f.joined.assign(f.data);
        f.joined.append("\n").append(value);
        f.data = f.joined;
      } else {
        f.data = value;
      }
      f.has_data = true;
    }
  }
}

// The data's top-level `type` is one of `names`; parsed only when the data names one somewhere.
bool typed_as_one_of(std::string_view data, const std::array<std::string_view, 3>& names) {
  if (!mentions_one_of(data, names)) return false;
  boost::system::error_code ec;
  auto value = boost::json::parse(data, ec);
  if (ec || !value.is_object()) return false;
  const auto* type = value.as_object().if_contains("type");
  return type != nullptr && type->is_string() && one_of(type->as_string(), names);
}

// The reading of all the event's fields: for the rare event whose first line does not decide.
bool ends_answer_read_whole(surface s, std::string_view event) {
  event_fields f;
  read_fields(event, f);
  if (s == surface::chat || s == surface::completions) return f.has_data && f.data == "[DONE]";
  if (!f.name.empty()) return one_of(f.name, ends_of(s));
  return f.has_data && typed_as_one_of(f.data, ends_of(s));
}

}  // namespace

// Every read of a relayed stream asks this of its last event, so the common events are decided
// by their first line alone: the `event:` name where there is one, else the one data line.
bool ends_answer(surface s, std::string_view event) {
  if (s == surface::embeddings || s == surface::count_tokens) return false;
  const bool openai_stream = s == surface::chat || s == surface::completions;
  auto first = event.substr(0, event.find('\n'));
  const auto rest = event.substr(first.size());
  if (!first.empty() && first.back() == '\r') first.remove_suffix(1);
  if (!openai_stream && first.starts_with("event:"))
    return one_of(value_after(first, 5), ends_of(s));
  if (first.starts_with("data:")) {
    // [DONE] alone: a second data line would join it into other data.
    if (openai_stream)
      return value_after(first, 4) == "[DONE]" && rest.find("data") == std::string_view::npos;
    // An unnamed event is read whole only when it names a terminal type somewhere.
    if (!mentions_one_of(event, ends_of(s))) return false;
  }
  return ends_answer_read_whole(s, event);
}

}  // namespace tether
