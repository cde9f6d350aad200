#include "actors/policy/wire/output_event.hpp"

namespace tether {
namespace {

// A string member with a value that is not empty: `"name":"x…`, spaces allowed after the colon
// (servers written in Python put one there).
bool has_text(std::string_view event, std::string_view member) {
  for (auto at = event.find(member); at != std::string_view::npos;
       at = event.find(member, at + member.size())) {
    auto i = at + member.size();
    while (i < event.size() && event[i] == ' ') ++i;
    if (i + 1 < event.size() && event[i] == '"' && event[i + 1] != '"') return true;
  }
  return false;
}

}  // namespace

bool carries_output(surface where, std::string_view event) {
  switch (where) {
    case surface::chat:
      return has_text(event, R"("content":)") || has_text(event, R"("arguments":)");
    case surface::completions:
      return has_text(event, R"("text":)");
    case surface::responses:
      return event.find("response.output_text.delta") != std::string_view::npos ||
             event.find("response.function_call_arguments.delta") != std::string_view::npos;
    case surface::messages:
      return event.find("content_block_delta") != std::string_view::npos;
    default:
      return false;
  }
}

bool is_usage_chunk(std::string_view event) {
  return event.find(R"("choices":[])") != std::string_view::npos &&
         event.find(R"("usage":{)") != std::string_view::npos;
}

}  // namespace tether
