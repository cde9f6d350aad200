// The event that ends an answer on each streaming surface: OpenAI chat's and completions'
// `data: [DONE]`, the Responses API's `response.completed`, `response.incomplete` or
// `response.failed`, Anthropic's `message_stop`. Once it has been relayed the engine's work on
// the answer is over, and the caller's stream can end without waiting for the upstream's own end
// of the body: a client that closes as soon as it has read that event (Codex does) has been
// answered whole, not lost.
#pragma once

#include <string_view>

#include "config/surface.hpp"

namespace tether {

// Whether `event`, one whole SSE event as the upstream framed it, is the last of an answer on
// surface `s`. A named event is judged by its `event:` name; an unnamed one on the Responses and
// Messages surfaces by its data's top-level `type`.
bool ends_answer(surface s, std::string_view event);

}  // namespace tether
