#include "bench/mock/stream_close.hpp"

namespace tether::mock {
namespace {
std::optional<std::chrono::milliseconds> configured;  // written before any session runs
}  // namespace

void set_close_after_stream(std::optional<std::chrono::milliseconds> after) {
  configured = after;
}

std::optional<std::chrono::milliseconds> close_after_stream() {
  return configured;
}

}  // namespace tether::mock
