// One io thread serves every connection asynchronously, so a hanging connection costs nothing
// and the destructor can close them all by stopping the context.
#include "tests/support/otlp_receiver.hpp"

#include <condition_variable>
#include <mutex>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

namespace tether::test {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

struct otlp_receiver::impl {
  explicit impl(otlp_mode m)
      : mode(m), acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {}

  struct connection : std::enable_shared_from_this<connection> {
    connection(impl& owner, tcp::socket s) : owner(owner), socket(std::move(s)) {}

    void do_read() {
      parser.emplace();
      parser->body_limit(64 * 1024 * 1024);
      http::async_read(
          socket, buffer, *parser,
          [self = shared_from_this()](const error_code& ec, std::size_t) { self->on_read(ec); });
    }

    void on_read(const error_code& ec) {
      if (ec) return;  // closed by the client (or by the destructor): nothing to answer
      auto request = parser->release();
      const auto answer = owner.record(request);
      if (!answer) {
        // Hang: the connection stays open (owned by the receiver) and is never answered.
        std::lock_guard lock(owner.mutex);
        owner.hanging.push_back(shared_from_this());
        return;
      }
      response.emplace(answer->first, 11);
      response->set(http::field::content_type, "application/json");
      response->keep_alive(request.keep_alive());
      response->body() = answer->second;
      response->prepare_payload();
      http::async_write(socket, *response,
                        [self = shared_from_this()](const error_code& write_ec, std::size_t) {
                          if (write_ec || !self->response->keep_alive()) return;
                          self->do_read();
                        });
    }

    impl& owner;
    tcp::socket socket;
    beast::flat_buffer buffer;
    std::optional<http::request_parser<http::string_body>> parser;
    std::optional<http::response<http::string_body>> response;
  };

  void do_accept() {
    acceptor.async_accept([this](const error_code& ec, tcp::socket socket) {
      if (ec) return;
      {
        std::lock_guard lock(mutex);
        ++connection_count;
      }
      std::make_shared<connection>(*this, std::move(socket))->do_read();
      do_accept();
    });
  }

  // What to answer (status, body), or nullopt to hang.
  std::optional<std::pair<http::status, std::string>> record(
      const http::request<http::string_body>& request) {
    std::lock_guard lock(mutex);
    ++request_count;
    changed.notify_all();
    const bool traces = request.method() == http::verb::post && request.target() == "/v1/traces";
    if (traces) bodies.push_back(request.body());
    if (mode == otlp_mode::hang) return std::nullopt;
    if (mode == otlp_mode::fail) return std::pair{http::status::service_unavailable, "{}"};
    if (!traces) return std::pair{http::status::not_found, "{}"};
    auto content_type = request[http::field::content_type];
    if (content_type.substr(0, content_type.find(';')) != "application/json")
      return std::pair{http::status::unsupported_media_type, "{}"};
    error_code ec;
    auto parsed = json::parse(request.body(), ec);
    if (ec || !parsed.is_object()) return std::pair{http::status::bad_request, "{}"};
    collect_spans(parsed.as_object());
    return std::pair{http::status::ok, "{}"};
  }

  // Under mutex.
  void collect_spans(const json::object& body) {
    const auto* resource_spans = body.if_contains("resourceSpans");
    if (resource_spans == nullptr || !resource_spans->is_array()) return;
    for (const auto& rs : resource_spans->as_array()) {
      const auto* scope_spans = rs.is_object() ? rs.as_object().if_contains("scopeSpans") : nullptr;
      if (scope_spans == nullptr || !scope_spans->is_array()) continue;
      for (const auto& ss : scope_spans->as_array()) {
        const auto* list = ss.is_object() ? ss.as_object().if_contains("spans") : nullptr;
        if (list == nullptr || !list->is_array()) continue;
        for (const auto& span : list->as_array()) {
          if (span.is_object()) spans.push_back(span.as_object());
        }
      }
    }
  }

  asio::io_context io;
  otlp_mode mode;  // guarded by mutex
  tcp::acceptor acceptor;
  std::thread thread;

  mutable std::mutex mutex;
  std::condition_variable changed;
  std::size_t request_count = 0;
  std::size_t connection_count = 0;
  std::vector<std::string> bodies;
  std::vector<json::object> spans;
  std::vector<std::shared_ptr<connection>> hanging;
};

otlp_receiver::otlp_receiver(otlp_mode mode) : impl_(std::make_unique<impl>(mode)) {
  impl_->acceptor.listen();
  impl_->do_accept();
  impl_->thread = std::thread([this] { impl_->io.run(); });
}

otlp_receiver::~otlp_receiver() {
  impl_->io.stop();
  impl_->thread.join();
  // The hanging connections close here, before the context their sockets belong to.
  impl_->hanging.clear();
}

std::uint16_t otlp_receiver::port() const {
  return impl_->acceptor.local_endpoint().port();
}

std::string otlp_receiver::endpoint() const {
  return "http://127.0.0.1:" + std::to_string(port()) + "/v1/traces";
}

void otlp_receiver::set_mode(otlp_mode mode) {
  std::lock_guard lock(impl_->mutex);
  impl_->mode = mode;
}

std::size_t otlp_receiver::requests() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->request_count;
}

std::size_t otlp_receiver::connections() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->connection_count;
}

std::vector<std::string> otlp_receiver::bodies() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->bodies;
}

std::vector<boost::json::object> otlp_receiver::spans() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->spans;
}

std::vector<boost::json::object> otlp_receiver::wait_for_spans(const spans_predicate& done,
                                                               std::chrono::milliseconds timeout) {
  std::unique_lock lock(impl_->mutex);
  impl_->changed.wait_for(lock, timeout, [&] { return done(impl_->spans); });
  return impl_->spans;
}

bool otlp_receiver::wait_for_requests(std::size_t n, std::chrono::milliseconds timeout) {
  std::unique_lock lock(impl_->mutex);
  return impl_->changed.wait_for(lock, timeout, [&] { return impl_->request_count >= n; });
}

std::optional<boost::json::value> span_attribute(const boost::json::object& span,
                                                 std::string_view key) {
  const auto* attributes = span.if_contains("attributes");
  if (attributes == nullptr || !attributes->is_array()) return std::nullopt;
  for (const auto& attribute : attributes->as_array()) {
    if (!attribute.is_object()) continue;
    const auto& kv = attribute.as_object();
    const auto* k = kv.if_contains("key");
    const auto* v = kv.if_contains("value");
    if (k == nullptr || !k->is_string() || k->as_string() != key) continue;
    if (v == nullptr || !v->is_object()) return json::value{};
    const auto& any = v->as_object();
    if (const auto* s = any.if_contains("stringValue")) return *s;
    if (const auto* i = any.if_contains("intValue")) {
      // The JSON mapping sends int64 as a string; a number is accepted as well.
      if (i->is_string()) return json::value(std::stoll(std::string(i->as_string())));
      return *i;
    }
    if (const auto* d = any.if_contains("doubleValue")) return *d;
    if (const auto* b = any.if_contains("boolValue")) return *b;
    return json::value{};
  }
  return std::nullopt;
}

bool span_has_event(const boost::json::object& span, std::string_view name) {
  const auto* events = span.if_contains("events");
  if (events == nullptr || !events->is_array()) return false;
  for (const auto& event : events->as_array()) {
    if (!event.is_object()) continue;
    const auto* n = event.as_object().if_contains("name");
    if (n != nullptr && n->is_string() && n->as_string() == name) return true;
  }
  return false;
}

std::vector<boost::json::object> spans_named(const std::vector<boost::json::object>& spans,
                                             std::string_view name) {
  std::vector<boost::json::object> out;
  for (const auto& span : spans) {
    const auto* n = span.if_contains("name");
    if (n != nullptr && n->is_string() && n->as_string() == name) out.push_back(span);
  }
  return out;
}

}  // namespace tether::test
