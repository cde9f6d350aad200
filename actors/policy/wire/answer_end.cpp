#include "actors/policy/wire/answer_end.hpp"

#include <array>
#include <boost/json.hpp>
#include <string>

namespace tether {
namespace {

// One data line (every event of the streams tether relays) is viewed in place; only an event
// of several is joined into `joined`, so the check costs no allocation per read.
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
    auto value = colon == std::string_view::npos ? std::string_view{} : line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
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

// The data's top-level `type`, parsed only when the data names one of `names` somewhere: the
// stream's other events (most of them) cost one scan each, not a parse.
template <std::size_t N>
bool typed_as_one_of(std::string_view data, const std::array<std::string_view, N>& names) {
  bool mentioned = false;
  for (auto n : names) {
    if (data.find(n) != std::string_view::npos) mentioned = true;
  }
  if (!mentioned) return false;
  boost::system::error_code ec;
  auto value = boost::json::parse(data, ec);
  if (ec || !value.is_object()) return false;
  const auto* type = value.as_object().if_contains("type");
  if (type == nullptr || !type->is_string()) return false;
  for (auto n : names) {
    if (type->as_string() == n) return true;
  }
  return false;
}

constexpr std::array<std::string_view, 3> responses_ends{"response.completed",
                                                         "response.incomplete", "response.failed"};
constexpr std::array<std::string_view, 1> messages_ends{"message_stop"};

template <std::size_t N>
bool named_or_typed(const event_fields& f, const std::array<std::string_view, N>& names) {
  if (!f.name.empty()) {
    for (auto n : names) {
      if (f.name == n) return true;
    }
    return false;
  }
  return f.has_data && typed_as_one_of(f.data, names);
}

}  // namespace

bool ends_answer(surface s, std::string_view event) {
  if (s == surface::embeddings || s == surface::count_tokens) return false;
  event_fields f;
  read_fields(event, f);
  switch (s) {
    case surface::chat:
    case surface::completions:
      return f.has_data && f.data == "[DONE]";
    case surface::responses:
      return named_or_typed(f, responses_ends);
    case surface::messages:
      return named_or_typed(f, messages_ends);
    case surface::embeddings:
    case surface::count_tokens:
      break;
  }
  return false;
}

}  // namespace tether
