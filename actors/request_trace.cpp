#include "actors/request_trace.hpp"

#include <chrono>

namespace tether {
namespace {

std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool is_failure(outcome o) {
  return o != outcome::ok;
}

}  // namespace

request_trace::request_trace(net::otlp_exporter* exporter, const std::string* incoming,
                             std::int64_t arrival_steady_ns)
    : exporter_(exporter), start_ns_(arrival_steady_ns) {
  std::optional<trace_context> joined;
  if (incoming != nullptr) joined = parse_traceparent(*incoming);
  if (joined) {
    server_.trace_id = joined->trace_id;
    server_.flags = joined->flags;
    parent_span_id_ = joined->span_id;
  } else {
    server_.trace_id = new_trace_id();
  }
  // The SERVER span's id and clock only matter to a span that is exported: the attempts'
  // traceparents carry their own span ids.
  if (exporter_ != nullptr) {
    steady_to_unix_ = static_cast<std::int64_t>(net::unix_nano_now()) - steady_now_ns();
    server_.span_id = new_span_id();
  }
}

std::uint64_t request_trace::unix_ns(std::int64_t steady_ns) const {
  return static_cast<std::uint64_t>(steady_ns + steady_to_unix_);
}

std::string request_trace::begin_attempt(std::uint32_t resend_count, const std::string& upstream,
                                         const std::string& server_address,
                                         std::uint16_t server_port, const std::string& url,
                                         std::int64_t start_ns) {
  const auto digits = new_span_id_digits();
  const std::string_view span_id{digits.data(), digits.size()};
  if (exporter_ != nullptr) {
    net::span_data s;
    s.trace_id = server_.trace_id;
    s.span_id = span_id;
    s.parent_span_id = server_.span_id;
    s.name = "POST";
    s.kind = net::span_kind::client;
    s.start_unix_nano = unix_ns(start_ns);
    s.attributes = {{"http.request.method", std::string{"POST"}},
                    {"server.address", server_address},
                    {"server.port", static_cast<std::int64_t>(server_port)},
                    {"url.full", url},
                    {"tether.upstream", upstream}};
    if (resend_count > 0) {
      s.attributes.push_back(
          {"http.request.resend_count", static_cast<std::int64_t>(resend_count)});
    }
    attempt_ = std::move(s);
  }
  return format_traceparent(server_.trace_id, span_id, server_.flags);
}

void request_trace::end_attempt(std::optional<int> status, outcome result, std::int64_t end_ns) {
  if (!attempt_) return;
  auto s = std::move(*attempt_);
  attempt_.reset();
  s.end_unix_nano = unix_ns(end_ns);
  if (status)
    s.attributes.push_back({"http.response.status_code", static_cast<std::int64_t>(*status)});
  s.attributes.push_back({"tether.outcome", std::string{to_string(result)}});
  if (is_failure(result)) {
    s.attributes.push_back({"error.type", std::string{to_string(result)}});
    s.error = true;
    s.status_message = std::string{to_string(result)};
  }
  exporter_->submit(std::move(s));
}

void request_trace::event(const char* name, std::int64_t at_ns) {
  if (exporter_ == nullptr) return;
  events_.push_back({name, unix_ns(at_ns)});
}

void request_trace::finish(const std::string& method, const std::string& path,
                           const std::string& model, const std::string& request_id,
                           std::optional<int> status_sent, outcome result, std::int64_t end_ns) {
  if (exporter_ == nullptr) return;
  if (attempt_) end_attempt(std::nullopt, result, end_ns);
  net::span_data s;
  s.trace_id = server_.trace_id;
  s.span_id = server_.span_id;
  s.parent_span_id = parent_span_id_;
  s.name = method + " " + path;
  s.kind = net::span_kind::server;
  s.start_unix_nano = unix_ns(start_ns_);
  s.end_unix_nano = unix_ns(end_ns);
  s.attributes = {{"http.request.method", method},
                  {"url.path", path},
                  {"http.route", path},
                  {"tether.model", model},
                  {"tether.request_id", request_id},
                  {"tether.outcome", std::string{to_string(result)}}};
  if (status_sent) {
    s.attributes.push_back({"http.response.status_code", static_cast<std::int64_t>(*status_sent)});
  }
  if (is_failure(result)) {
    s.attributes.push_back({"error.type", std::string{to_string(result)}});
    s.error = true;
    s.status_message = std::string{to_string(result)};
  }
  s.events = std::move(events_);
  exporter_->submit(std::move(s));
}

}  // namespace tether
