#include "actors/policy/wire/answer_end.hpp"

#include <array>
#include <boost/json.hpp>
#include <string>

#include "actors/policy/wire/sse_event.hpp"

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
  const auto e = parse_event(event);
  if (s == surface::chat || s == surface::completions) return e.has_data && e.data == "[DONE]";
  if (!e.name.empty()) return one_of(e.name, ends_of(s));
  return e.has_data && typed_as_one_of(e.data, ends_of(s));
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
