// A local OTLP/HTTP JSON collector for tests: listens on 127.0.0.1 (port 0), collects what is
// POSTed to /v1/traces and answers 200 `{}` — or, by mode, never answers or fails.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

namespace tether::test {

enum class otlp_mode {
  normal,  // 200 `{}` to a JSON POST on /v1/traces (415 to another content-type, 400 to bad JSON)
  hang,    // accepts and reads the request, never answers, keeps the connection open
  fail,    // 503 to every request (the body is still recorded)
};

class otlp_receiver {
 public:
  explicit otlp_receiver(otlp_mode mode = otlp_mode::normal);
  ~otlp_receiver();  // closes every connection, hanging ones included
  otlp_receiver(const otlp_receiver&) = delete;
  otlp_receiver& operator=(const otlp_receiver&) = delete;

  std::uint16_t port() const;
  std::string endpoint() const;   // http://127.0.0.1:PORT/v1/traces: telemetry.otlp_endpoint
  void set_mode(otlp_mode mode);  // applies to requests read from now on

  std::size_t requests() const;             // every request read, whatever was answered
  std::size_t connections() const;          // every connection accepted
  std::vector<std::string> bodies() const;  // the JSON bodies POSTed to /v1/traces, in order
  // Span objects of all bodies (resourceSpans[].scopeSpans[].spans[]), in arrival order.
  std::vector<boost::json::object> spans() const;

  using spans_predicate = std::function<bool(const std::vector<boost::json::object>&)>;
  // Waits until `done` holds for spans(), or the timeout passes; returns spans() either way.
  std::vector<boost::json::object> wait_for_spans(
      const spans_predicate& done, std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // Waits until at least n requests were read; false if the timeout passed first.
  bool wait_for_requests(std::size_t n,
                         std::chrono::milliseconds timeout = std::chrono::seconds(5));

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

// Reading an OTLP span object back.
// The attribute's value unwrapped: stringValue → string, intValue → int64, doubleValue →
// double, boolValue → bool; nullopt if the span has no such attribute.
std::optional<boost::json::value> span_attribute(const boost::json::object& span,
                                                 std::string_view key);
bool span_has_event(const boost::json::object& span, std::string_view name);
// The spans whose `name` is `name`.
std::vector<boost::json::object> spans_named(const std::vector<boost::json::object>& spans,
                                             std::string_view name);

}  // namespace tether::test
