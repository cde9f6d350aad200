#include "bench/mock/behaviour.hpp"

#include <charconv>
#include <limits>
#include <utility>

namespace tether::mock {
namespace {

// The whole of `text` as a decimal number no larger than `max`, or nullopt.
std::optional<std::uint64_t> parse_number(std::string_view text, std::uint64_t max) {
  if (text.empty()) return std::nullopt;
  std::uint64_t value = 0;
  const auto* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc{} || ptr != end || value > max) return std::nullopt;
  return value;
}

bool consume_prefix(std::string_view& text, std::string_view prefix) {
  if (text.substr(0, prefix.size()) != prefix) return false;
  text.remove_prefix(prefix.size());
  return true;
}

// A day is far longer than any test or benchmark waits, and keeps timer arithmetic safe.
constexpr std::uint64_t max_ms = 24ULL * 3600 * 1000;
// The body is built in memory before it is sent; a GiB is more than any size limit worth testing.
constexpr std::uint64_t max_huge_mebibytes = 1024;
// tether's own ceiling for max_tokens_in_flight.
constexpr std::uint64_t max_kv_budget_tokens = 1ULL << 48;

}  // namespace

std::optional<behaviour> parse_behaviour(std::string_view model) {
  behaviour b;
  if (model == "mock") return b;
  if (model == "mock-hang") {
    b.kind = behaviour_kind::hang;
    return b;
  }
  static constexpr std::pair<std::string_view, behaviour_kind> fixed[] = {
      {"mock-badstatus", behaviour_kind::bad_status},
      {"mock-garbage", behaviour_kind::garbage},
      {"mock-truncated", behaviour_kind::truncated},
      {"mock-sse-cut", behaviour_kind::sse_cut},
      {"mock-badchunk", behaviour_kind::bad_chunk},
      {"mock-reset", behaviour_kind::reset},
      {"mock-drop", behaviour_kind::drop},
  };
  for (const auto& [name, kind] : fixed) {
    if (model == name) {
      b.kind = kind;
      return b;
    }
  }
  if (consume_prefix(model, "mock-huge-")) {
    auto mb = parse_number(model, max_huge_mebibytes);
    if (!mb || *mb == 0) return std::nullopt;
    b.kind = behaviour_kind::huge;
    b.mebibytes = static_cast<std::uint32_t>(*mb);
    return b;
  }
  if (consume_prefix(model, "mock-drip-")) {
    auto ms = parse_number(model, max_ms);
    if (!ms) return std::nullopt;
    b.kind = behaviour_kind::drip;
    b.delay = std::chrono::milliseconds(*ms);
    return b;
  }
  if (consume_prefix(model, "mock-kv-")) {
    auto dash = model.find('-');
    if (dash == std::string_view::npos) return std::nullopt;
    auto budget = parse_number(model.substr(0, dash), max_kv_budget_tokens);
    auto ms = parse_number(model.substr(dash + 1), max_ms);
    if (!budget || *budget == 0 || !ms) return std::nullopt;
    b.kind = behaviour_kind::kv;
    b.kv_budget_tokens = *budget;
    b.delay = std::chrono::milliseconds(*ms);
    return b;
  }
  if (consume_prefix(model, "mock-delay-")) {
    auto ms = parse_number(model, max_ms);
    if (!ms) return std::nullopt;
    b.kind = behaviour_kind::delay;
    b.delay = std::chrono::milliseconds(*ms);
    return b;
  }
  if (consume_prefix(model, "mock-stream-")) {
    b.stamped = consume_prefix(model, "stamped-");
    if (auto at = model.find("-linger-"); at != std::string_view::npos) {
      auto linger = parse_number(model.substr(at + 8), max_ms);
      if (!linger) return std::nullopt;
      b.linger = std::chrono::milliseconds(*linger);
      model = model.substr(0, at);
    }
    auto x = model.find('x');
    if (x == std::string_view::npos) return std::nullopt;
    auto n = parse_number(model.substr(0, x), 1'000'000);
    auto ms = parse_number(model.substr(x + 1), max_ms);
    if (!n || *n == 0 || !ms) return std::nullopt;
    b.kind = behaviour_kind::stream;
    b.chunks = static_cast<std::uint32_t>(*n);
    b.delay = std::chrono::milliseconds(*ms);
    return b;
  }
  if (consume_prefix(model, "mock-fail-")) {
    // 1xx cannot end a response and 2xx is not a failure.
    auto status = parse_number(model, 599);
    if (!status || *status < 300) return std::nullopt;
    b.kind = behaviour_kind::fail;
    b.status = static_cast<unsigned>(*status);
    return b;
  }
  if (consume_prefix(model, "mock-ratelimit-")) {
    auto secs = parse_number(model, std::numeric_limits<std::uint32_t>::max());
    if (!secs) return std::nullopt;
    b.kind = behaviour_kind::rate_limit;
    b.retry_after_seconds = static_cast<std::uint32_t>(*secs);
    return b;
  }
  if (consume_prefix(model, "mock-flaky-")) {
    auto percent = parse_number(model, 100);
    if (!percent) return std::nullopt;
    b.kind = behaviour_kind::flaky;
    b.percent = static_cast<unsigned>(*percent);
    return b;
  }
  return std::nullopt;
}

bool flaky_request_fails(std::uint64_t k, unsigned percent) {
  return (k + 1) * percent / 100 > k * percent / 100;
}

}  // namespace tether::mock
