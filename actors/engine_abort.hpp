// engine = "sglang": the engine keeps decoding a non-streaming request whose caller's connection
// closed until its own output wait times out, so a cancelled attempt is also aborted by its rid:
// `POST /abort_request {"rid": ...}` to the attempt's upstream, outside the budget (it frees
// work, it asks for none), bounded by the upstream's connect timeout and never retried (a lost
// abort leaves the engine's own timeout). Its result is counted in
// tether_engine_aborts_total{result="sent|failed"}.
#pragma once

#include <cstddef>
#include <string_view>

#include "actors/runtime.hpp"

namespace tether {

void send_engine_abort(const gateway_runtime& rt, std::size_t upstream, std::string_view rid);

}  // namespace tether
