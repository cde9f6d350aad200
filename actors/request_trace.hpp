// The spans of one request (OpenTelemetry HTTP conventions): a SERVER span that joins the caller's
// traceparent, one CLIENT span per attempt whose id is the traceparent sent upstream. Ids are made
// whether or not an exporter is configured, so trace context always propagates.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "actors/policy/request/outcome.hpp"
#include "actors/policy/request/trace_context.hpp"
#include "net/otlp_exporter.hpp"

namespace tether {

class request_trace {
 public:
  // `exporter` may be null (tracing off). Times are steady_clock nanoseconds, as in the actors.
  request_trace(net::otlp_exporter* exporter, const std::string* incoming_traceparent,
                std::int64_t arrival_steady_ns);

  const std::string& trace_id() const { return server_.trace_id; }

  // Opens the CLIENT span of an attempt; returns the traceparent to send upstream.
  std::string begin_attempt(std::uint32_t resend_count, const std::string& upstream,
                            const std::string& server_address, std::uint16_t server_port,
                            const std::string& url, std::int64_t start_ns);
  void end_attempt(std::optional<int> status, outcome result, std::int64_t end_ns);

  // caller_left, deadline_exceeded, cancel_sent, work_ended
  void event(const char* name, std::int64_t at_ns);

  // Closes the SERVER span and hands every span to the exporter.
  void finish(const std::string& method, const std::string& path, const std::string& model,
              const std::string& request_id, std::optional<int> status_sent, outcome result,
              std::int64_t end_ns);

 private:
  std::uint64_t unix_ns(std::int64_t steady_ns) const;

  net::otlp_exporter* exporter_;
  std::int64_t steady_to_unix_ = 0;
  trace_context server_;
  std::string parent_span_id_;
  std::int64_t start_ns_ = 0;
  std::vector<net::span_event> events_;
  std::optional<net::span_data> attempt_;
};

}  // namespace tether
