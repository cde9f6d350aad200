// Why a request's attempt tree is stopped from above. The request actor sends it down the tree
// as the exit reason (messages.hpp, stop_error); the connection actor closes its socket whatever
// the reason, and the trace names it.
#pragma once

#include <cstdint>
#include <string_view>

namespace tether {

enum class stop_reason : std::uint8_t {
  deadline = 1,  // the whole-request deadline passed
  client_gone,   // the caller closed its connection
  drain,         // the gateway is shutting down and the drain timeout passed
};

std::string_view to_string(stop_reason r);

}  // namespace tether
