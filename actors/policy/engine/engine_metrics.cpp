#include "actors/policy/engine/engine_metrics.hpp"

#include <charconv>
#include <cmath>

namespace tether {
namespace {

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == ':';
}

// A CR too: a text with CRLF line ends reads as with LF.
bool blank(char c) {
  return c == ' ' || c == '\t' || c == '\r';
}

// One sample line (no newline in it): its value, if the line is a sample of `name`.
std::optional<double> sample_of(std::string_view line, std::string_view name) {
  std::size_t i = 0;
  while (i < line.size() && blank(line[i])) ++i;
  const std::size_t start = i;
  while (i < line.size() && name_char(line[i])) ++i;
  if (line.substr(start, i - start) != name) return std::nullopt;
  if (i < line.size() && line[i] == '{') {
    bool quoted = false;
    for (++i; i < line.size(); ++i) {
      const char c = line[i];
      if (quoted && c == '\\') {
        ++i;  // the escaped byte, whatever it is
      } else if (c == '"') {
        quoted = !quoted;
      } else if (!quoted && c == '}') {
        break;
      }
    }
    if (i >= line.size()) return std::nullopt;  // the labels never closed
    ++i;
  }
  if (i >= line.size() || !blank(line[i])) return std::nullopt;
  while (i < line.size() && blank(line[i])) ++i;
  std::size_t end = i;
  while (end < line.size() && !blank(line[end])) ++end;
  std::string_view token = line.substr(i, end - i);
  if (!token.empty() && token.front() == '+') token.remove_prefix(1);
  double value = 0;
  const auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
  if (ec != std::errc{} || ptr != token.data() + token.size() || token.empty()) return std::nullopt;
  if (!std::isfinite(value) || value < 0) return std::nullopt;
  return value;
}

std::int64_t whole(double sum) {
  if (sum >= static_cast<double>(max_engine_requests)) return max_engine_requests;
  return std::llround(sum);
}

}  // namespace

engine_series series_of(const config::upstream_config& u) {
  engine_series s;
  switch (u.engine) {
    case config::engine_kind::llamacpp:
      s = {"llamacpp:requests_processing", "llamacpp:requests_deferred"};
      break;
    case config::engine_kind::vllm:
      s = {"vllm:num_requests_running", "vllm:num_requests_waiting"};
      break;
    case config::engine_kind::sglang:
      s = {"sglang:num_running_reqs", "sglang:num_queue_reqs"};
      break;
    case config::engine_kind::openai:
      break;
  }
  if (!u.metrics_running_series.empty()) s.running = u.metrics_running_series;
  if (!u.metrics_queued_series.empty()) s.queued = u.metrics_queued_series;
  return s;
}

std::optional<engine_counts> read_engine_counts(std::string_view text,
                                                const engine_series& series) {
  if (series.running.empty() || text.size() > max_engine_metrics_bytes) return std::nullopt;
  bool found = false;
  double running = 0;
  double queued = 0;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const auto line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (auto v = sample_of(line, series.running)) {
      found = true;
      running += *v;
    } else if (!series.queued.empty()) {
      if (auto q = sample_of(line, series.queued)) queued += *q;
    }
  }
  if (!found) return std::nullopt;
  return engine_counts{whole(running), whole(queued)};
}

}  // namespace tether
