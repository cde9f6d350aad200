// The exporter's moving parts, all but submit() on one strand:
//
//   submit() ─lock─▶ queue (≤ max_queue incl. the batch in flight) ──▶ full: dropped += 1
//                        │ max_batch waiting, nothing in flight: post try_send
//   flush timer ─────────┴──▶ try_send ─▶ encode ─▶ upstream_client POST ─▶ on_closed
//                                                    export_timeout: cancel     │
//                               export_done ◀──────────────────────────────────┘
//                               2xx: exported += n   else: failed_batches += 1, dropped += n
//
// Nothing waits for the collector but the next batch: with one export in flight at a time a
// hanging collector costs one connection, and the queue bound turns it into counted drops.
#include "net/otlp_exporter.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <iterator>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/json.hpp>

#include "net/io_runtime.hpp"
#include "net/upstream.hpp"

namespace tether::net {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;

// ---- encoding -------------------------------------------------------------------------------

json::value any_value(const std::variant<std::string, std::int64_t, double, bool>& value) {
  json::object out;
  if (const auto* s = std::get_if<std::string>(&value)) {
    out["stringValue"] = *s;
  } else if (const auto* i = std::get_if<std::int64_t>(&value)) {
    // The protobuf JSON mapping writes 64-bit integers as strings (JavaScript loses precision).
    out["intValue"] = std::to_string(*i);
  } else if (const auto* d = std::get_if<double>(&value)) {
    // JSON has no NaN or infinity; the protobuf mapping spells them as these strings.
    if (std::isnan(*d))
      out["doubleValue"] = "NaN";
    else if (std::isinf(*d))
      out["doubleValue"] = *d > 0 ? "Infinity" : "-Infinity";
    else
      out["doubleValue"] = *d;
  } else {
    out["boolValue"] = std::get<bool>(value);
  }
  return out;
}

json::array key_values(const std::vector<span_attribute>& attributes) {
  json::array out;
  out.reserve(attributes.size());
  for (const auto& attribute : attributes) {
    out.push_back(json::object{{"key", attribute.key}, {"value", any_value(attribute.value)}});
  }
  return out;
}

json::object encode_span(const span_data& span) {
  json::object out;
  out["traceId"] = span.trace_id;
  out["spanId"] = span.span_id;
  if (!span.parent_span_id.empty()) out["parentSpanId"] = span.parent_span_id;
  out["name"] = span.name;
  out["kind"] = static_cast<int>(span.kind);
  out["startTimeUnixNano"] = std::to_string(span.start_unix_nano);
  out["endTimeUnixNano"] = std::to_string(span.end_unix_nano);
  out["attributes"] = key_values(span.attributes);
  json::array events;
  events.reserve(span.events.size());
  for (const auto& event : span.events) {
    events.push_back(
        json::object{{"timeUnixNano", std::to_string(event.time_unix_nano)}, {"name", event.name}});
  }
  out["events"] = std::move(events);
  // Status.StatusCode: 0 UNSET, 2 ERROR. OK (1) is for an application's explicit verdict, which
  // the HTTP conventions leave unused for instrumentation like ours.
  json::object status;
  if (span.error) {
    status["code"] = 2;
    if (!span.status_message.empty()) status["message"] = span.status_message;
  } else {
    status["code"] = 0;
  }
  out["status"] = std::move(status);
  return out;
}

// ---- validation and the endpoint ----------------------------------------------------------

bool is_lower_hex_id(const std::string& id, std::size_t size) {
  if (id.size() != size) return false;
  bool nonzero = false;
  for (char c : id) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    nonzero = nonzero || c != '0';
  }
  return nonzero;
}

bool is_well_formed(const span_data& span) {
  return is_lower_hex_id(span.trace_id, 32) && is_lower_hex_id(span.span_id, 16) &&
         (span.parent_span_id.empty() || is_lower_hex_id(span.parent_span_id, 16));
}

bool starts_with_ignoring_case(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    char c = s[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != prefix[i]) return false;
  }
  return true;
}

struct parsed_endpoint {
  upstream_endpoint endpoint;
  std::string target;
};

parsed_endpoint parse_endpoint(const std::string& url, std::chrono::milliseconds connect_timeout) {
  auto invalid = [&](const std::string& why) {
    return std::invalid_argument("telemetry.otlp_endpoint '" + url + "': " + why);
  };
  parsed_endpoint out;
  std::string_view rest = url;
  if (starts_with_ignoring_case(rest, "http://")) {
    rest.remove_prefix(7);
    out.endpoint.port = 80;
  } else if (starts_with_ignoring_case(rest, "https://")) {
    rest.remove_prefix(8);
    out.endpoint.tls = true;
    out.endpoint.port = 443;
  } else {
    throw invalid("not an http:// or https:// URL");
  }
  if (auto hash = rest.find('#'); hash != std::string_view::npos) rest = rest.substr(0, hash);
  const auto authority_end = rest.find_first_of("/?");
  auto authority = rest.substr(0, authority_end);
  const auto target =
      authority_end == std::string_view::npos ? std::string_view{} : rest.substr(authority_end);
  if (authority.find('@') != std::string_view::npos) throw invalid("user info is not supported");

  std::string_view host;
  std::optional<std::string_view> port;
  if (!authority.empty() && authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) throw invalid("unterminated IPv6 literal");
    host = authority.substr(1, close - 1);
    auto after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') throw invalid("unexpected characters after the host");
      port = after.substr(1);
    }
  } else {
    const auto colon = authority.find(':');
    host = authority.substr(0, colon);
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (host.empty()) throw invalid("no host");
  out.endpoint.host = std::string(host);
  if (port) {
    if (port->empty() || port->size() > 5 ||
        port->find_first_not_of("0123456789") != std::string_view::npos)
      throw invalid("bad port");
    const auto number = std::stoul(std::string(*port));
    if (number == 0 || number > 65535) throw invalid("bad port");
    out.endpoint.port = static_cast<std::uint16_t>(number);
  }
  // OTLP/HTTP's path for traces, when the URL names only the collector.
  out.target = target.empty() || target.front() == '?' ? "/v1/traces" + std::string(target)
                                                       : std::string(target);
  out.endpoint.connect_timeout = connect_timeout;
  // One export at a time needs one connection, kept alive between batches.
  out.endpoint.max_idle_connections = 1;
  return out;
}

}  // namespace

std::string encode_otlp_json(const std::vector<span_data>& spans, const std::string& service_name) {
  json::array encoded;
  encoded.reserve(spans.size());
  for (const auto& span : spans) encoded.push_back(encode_span(span));
  json::object resource{{"attributes", key_values({span_attribute{"service.name", service_name}})}};
  json::object scope_spans{{"scope", json::object{{"name", "tether"}}},
                           {"spans", std::move(encoded)}};
  json::object resource_spans{{"resource", std::move(resource)},
                              {"scopeSpans", json::array{std::move(scope_spans)}}};
  return json::serialize(json::object{{"resourceSpans", json::array{std::move(resource_spans)}}});
}

std::uint64_t unix_nano_now() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

// ---- the exporter -------------------------------------------------------------------------

struct otlp_exporter::impl : std::enable_shared_from_this<impl> {
  impl(io_runtime& io, otlp_options opts, parsed_endpoint parsed)
      : options(std::move(opts)),
        target(std::move(parsed.target)),
        strand(asio::make_strand(*static_cast<asio::io_context*>(io.native()))),
        flush_timer(strand),
        export_timer(strand),
        client(io, std::move(parsed.endpoint)) {}

  ~impl() {
    // Whoever drops the last reference, the export in flight must not outlive the exporter.
    if (exchange) exchange->cancel();
  }

  void start() { arm_flush_timer(); }

  void arm_flush_timer() {
    flush_timer.expires_after(options.flush_interval);
    flush_timer.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (!self || ec) return;
      self->try_send();
      std::lock_guard lock(self->mutex);
      if (!self->stopped) self->arm_flush_timer();
    });
  }

  // Strand only.
  void try_send() {
    std::vector<span_data> batch;
    {
      std::lock_guard lock(mutex);
      if (stopped || in_flight != 0 || queue.empty()) return;
      const auto n = std::min(queue.size(), std::max<std::size_t>(options.max_batch, 1));
      batch.reserve(n);
      std::move(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(n),
                std::back_inserter(batch));
      queue.erase(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(n));
      in_flight = n;
    }
    upstream_request request;
    request.method = "POST";
    request.target = target;
    request.headers.push_back({"content-type", "application/json"});
    request.body = encode_otlp_json(batch, options.service_name);
    const auto count = batch.size();
    batch.clear();

    exchange = client.start(std::move(request), std::make_shared<events>(weak_from_this(), count));
    export_timer.expires_after(options.export_timeout);
    export_timer.async_wait([exchange = std::weak_ptr<upstream_exchange>(exchange)](
                                const boost::system::error_code& ec) {
      if (ec) return;
      if (auto running = exchange.lock()) running->cancel();
    });
  }

  // Strand only: the exchange of `count` spans has closed.
  void export_done(bool ok, std::size_t count) {
    export_timer.cancel();
    exchange.reset();
    bool more = false;
    {
      std::lock_guard lock(mutex);
      in_flight = 0;
      if (ok) {
        exported += count;
      } else {
        ++failed_batches;
        dropped += count;
      }
      more = !stopped && (queue.size() >= options.max_batch || (draining && !queue.empty()));
    }
    changed.notify_all();
    if (more) try_send();
  }

  // What one export request's exchange reports, on the exchange's io thread (not the strand).
  class events : public upstream_events {
   public:
    events(std::weak_ptr<impl> owner, std::size_t count)
        : owner_(std::move(owner)), count_(count) {}
    void on_connected(bool) override {}
    void on_head(int status, header_list) override { status_ = status; }
    void on_body(std::string) override {}  // OTLP's partial-success detail: nothing to act on
    void on_end() override { ended_ = true; }
    void on_failure(upstream_failure, std::string) override {}  // on_closed tells it all
    void on_closed() override {
      const bool ok = ended_ && status_ >= 200 && status_ < 300;
      auto owner = owner_.lock();
      if (!owner) return;
      asio::post(owner->strand, [weak = owner_, ok, count = count_] {
        if (auto self = weak.lock()) self->export_done(ok, count);
      });
    }

   private:
    std::weak_ptr<impl> owner_;
    std::size_t count_;
    int status_ = 0;
    bool ended_ = false;
  };

  const otlp_options options;
  const std::string target;
  asio::strand<asio::io_context::executor_type> strand;
  asio::steady_timer flush_timer;   // strand only
  asio::steady_timer export_timer;  // strand only
  upstream_client client;
  std::shared_ptr<upstream_exchange> exchange;  // strand only

  mutable std::mutex mutex;
  std::condition_variable changed;
  // Guarded by mutex. pending = queue + in_flight never exceeds options.max_queue.
  std::deque<span_data> queue;
  std::size_t in_flight = 0;
  bool accepting = true;
  bool draining = false;
  bool stopped = false;
  std::uint64_t submitted = 0;
  std::uint64_t exported = 0;
  std::uint64_t dropped = 0;
  std::uint64_t failed_batches = 0;
  std::atomic<bool> kick_posted{false};
};

otlp_exporter::otlp_exporter(io_runtime& io, otlp_options options) {
  auto parsed = parse_endpoint(options.endpoint, options.export_timeout);
  impl_ = std::make_shared<impl>(io, std::move(options), std::move(parsed));
  impl_->start();
}

otlp_exporter::~otlp_exporter() {
  shutdown(std::chrono::milliseconds{0});
}

void otlp_exporter::submit(span_data span) {
  auto& d = *impl_;
  const bool well_formed = is_well_formed(span);
  bool kick = false;
  {
    std::lock_guard lock(d.mutex);
    ++d.submitted;
    if (!well_formed || !d.accepting || d.queue.size() + d.in_flight >= d.options.max_queue) {
      ++d.dropped;
      return;
    }
    d.queue.push_back(std::move(span));
    kick = d.queue.size() >= d.options.max_batch && d.in_flight == 0;
  }
  // A full batch goes now rather than at the next tick; one post covers any number of submits.
  if (kick && !d.kick_posted.exchange(true)) {
    asio::post(d.strand, [weak = std::weak_ptr<impl>(impl_)] {
      if (auto self = weak.lock()) {
        self->kick_posted = false;
        self->try_send();
      }
    });
  }
}

std::uint64_t otlp_exporter::submitted() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->submitted;
}

std::uint64_t otlp_exporter::exported() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->exported;
}

std::uint64_t otlp_exporter::dropped() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->dropped;
}

std::uint64_t otlp_exporter::failed_batches() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->failed_batches;
}

std::size_t otlp_exporter::pending() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->queue.size() + impl_->in_flight;
}

otlp_stats otlp_exporter::stats() const {
  std::lock_guard lock(impl_->mutex);
  return {impl_->submitted, impl_->exported, impl_->dropped, impl_->failed_batches,
          impl_->queue.size() + impl_->in_flight};
}

void otlp_exporter::shutdown(std::chrono::milliseconds bound) {
  auto& d = *impl_;
  const auto deadline = std::chrono::steady_clock::now() + bound;
  {
    std::lock_guard lock(d.mutex);
    if (!d.accepting) return;
    d.accepting = false;
    d.draining = true;
  }
  asio::post(d.strand, [weak = std::weak_ptr<impl>(impl_)] {
    if (auto self = weak.lock()) self->try_send();
  });
  {
    std::unique_lock lock(d.mutex);
    d.changed.wait_until(lock, deadline, [&] { return d.queue.empty() && d.in_flight == 0; });
    d.stopped = true;
    d.draining = false;
    d.dropped += d.queue.size();
    d.queue.clear();
  }
  // What is still in flight is cancelled; its spans are counted as dropped when it closes.
  asio::post(d.strand, [weak = std::weak_ptr<impl>(impl_)] {
    auto self = weak.lock();
    if (!self) return;
    self->flush_timer.cancel();
    self->export_timer.cancel();
    if (self->exchange) self->exchange->cancel();
  });
}

}  // namespace tether::net
