// Traces out as OTLP/HTTP JSON (issue #5). Debian has no OpenTelemetry C++ SDK, so this is a
// small exporter of its own: spans are queued (bounded), sent in batches by the gateway's own
// upstream client with at most one export request in flight, and dropped and counted, never
// waited for, when the collector is slow or dead. A request never pays for its telemetry.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace tether::net {

class io_runtime;

struct span_attribute {
  std::string key;
  std::variant<std::string, std::int64_t, double, bool> value;
};

struct span_event {
  std::string name;
  std::uint64_t time_unix_nano = 0;
};

// The values of OTLP's Span.SpanKind.
enum class span_kind { server = 2, client = 3 };

struct span_data {
  std::string trace_id;        // 32 lower-case hex digits
  std::string span_id;         // 16 lower-case hex digits
  std::string parent_span_id;  // 16 lower-case hex digits; empty for a root span
  std::string name;
  span_kind kind = span_kind::server;
  std::uint64_t start_unix_nano = 0;
  std::uint64_t end_unix_nano = 0;
  std::vector<span_attribute> attributes;
  std::vector<span_event> events;
  bool error = false;  // status ERROR with status_message; otherwise status UNSET
  std::string status_message;
};

struct otlp_options {
  std::string endpoint;  // http(s)://host[:port]/path, e.g. http://127.0.0.1:4318/v1/traces
  std::string service_name = "tether";
  std::size_t max_queue = 4096;  // spans waiting or in flight; beyond it submit() drops
  std::size_t max_batch = 512;   // spans per export request
  std::chrono::milliseconds flush_interval{200};
  std::chrono::milliseconds export_timeout{2000};  // connect + send + response, then cancelled
};

// One ExportTraceServiceRequest in the protobuf JSON mapping of OTLP/HTTP: ids as hex strings,
// kind and status code as integers, 64-bit integers (times, intValue) as decimal strings.
std::string encode_otlp_json(const std::vector<span_data>& spans, const std::string& service_name);

// Now, in the unit OTLP wants (system clock, ns since the Unix epoch).
std::uint64_t unix_nano_now();

// One consistent snapshot of the exporter's counters (see otlp_exporter::stats).
struct otlp_stats {
  std::uint64_t submitted = 0;
  std::uint64_t exported = 0;
  std::uint64_t dropped = 0;
  std::uint64_t failed_batches = 0;
  std::size_t pending = 0;
};

class otlp_exporter {
 public:
  // Throws std::invalid_argument when options.endpoint is not an http(s) URL. The exporter uses
  // `io`'s threads; it must be destroyed before `io` is.
  otlp_exporter(io_runtime& io, otlp_options options);
  ~otlp_exporter();  // shutdown(0 ms) unless shut down already
  otlp_exporter(const otlp_exporter&) = delete;
  otlp_exporter& operator=(const otlp_exporter&) = delete;

  // Thread-safe, O(1), never blocks on the network: queues the span, or drops and counts it when
  // the queue is full, after shutdown, or when its ids are not well-formed hex (a malformed
  // span would make the collector reject its whole batch).
  void submit(span_data span);

  // Every submitted span is, at any moment, exactly one of exported, dropped or pending:
  // submitted() == exported() + dropped() + pending(), and pending() <= max_queue.
  std::uint64_t submitted() const;
  std::uint64_t exported() const;  // acknowledged by the collector with a 2xx
  std::uint64_t dropped() const;   // queue full, malformed, in a failed batch, or left at shutdown
  std::uint64_t failed_batches() const;  // non-2xx, transport failure or export_timeout
  std::size_t pending() const;           // queued or in the export request in flight
  otlp_stats stats() const;              // all of the above at one instant

  // Stops accepting spans, sends what is queued within `bound`, then cancels what is still in
  // flight and drops the rest. Bounded by `bound` (plus a lock); idempotent. Must not be called
  // from one of the io_runtime's threads (it waits for them).
  void shutdown(std::chrono::milliseconds bound);

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

}  // namespace tether::net
