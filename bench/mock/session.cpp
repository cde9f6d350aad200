// A connection's life:
//
//   read loop (always pending, except while > buffered_limit of pipelined bytes wait)
//        │ bytes
//        ▼
//   idle ──request parsed──▶ working ──last byte written──▶ idle (keep-alive) / closed
//                              │
//                              └─ read sees EOF/RST ─▶ closed_by_client recorded, timer
//                                                      cancelled, socket closed
//                                 (or a new request on another connection finds it closed first:
//                                  peer_watch)
//
// Responses are formatted by hand (status line, headers, chunk framing): the mock must control
// exactly when each SSE event leaves, one event per chunk, one write per event.
#include "bench/mock/session.hpp"

#include <charconv>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/json.hpp>

#include "bench/mock/behaviour.hpp"
#include "bench/mock/kv_budget.hpp"
#include "bench/mock/openai_bodies.hpp"
#include "bench/mock/peer_watch.hpp"
#include "bench/mock/sglang.hpp"
#include "bench/mock/stats.hpp"
#include "bench/mock/stream_close.hpp"

namespace tether::mock {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;
using steady = std::chrono::steady_clock;

using tls_stream = asio::ssl::stream<tcp::socket>;

constexpr std::uint64_t max_body_bytes = 64ULL * 1024 * 1024;
constexpr std::uint32_t max_header_bytes = 64 * 1024;
constexpr std::size_t read_chunk_bytes = 64 * 1024;
// Pipelined bytes buffered while a request is worked on; beyond this the read pauses (and with
// it close detection, which only a misbehaving client can cause).
constexpr std::size_t buffered_limit = 1024 * 1024;
// mock-truncated promises this many bytes more than it sends.
constexpr std::size_t truncated_missing_bytes = 100;
constexpr std::size_t mebibyte = 1024 * 1024;

tcp::socket& socket_of(tcp::socket& s) {
  return s;
}
tcp::socket& socket_of(tls_stream& s) {
  return s.next_layer();
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// The stamp of mock-stream-stamped events: the clock of epoch_ms_now(), in whole µs.
std::int64_t epoch_us_now() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string chunk_frame(std::string_view payload) {
  char size[16];
  auto [end, ec] = std::to_chars(size, size + sizeof size, payload.size(), 16);
  (void)ec;
  std::string out(size, end);
  out.append("\r\n").append(payload).append("\r\n");
  return out;
}

// The stream's end marker (if its API has one) and the body's last chunk.
std::string stream_end_and_last_chunk(const completion_context& ctx) {
  auto end = stream_end_events(ctx);
  return (end.empty() ? std::string() : chunk_frame(end)) + "0\r\n\r\n";
}

std::optional<std::uint64_t> query_number(std::string_view query, std::string_view key) {
  while (!query.empty()) {
    auto amp = query.find('&');
    auto pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    auto eq = pair.find('=');
    if (eq == std::string_view::npos || pair.substr(0, eq) != key) continue;
    auto value = pair.substr(eq + 1);
    std::uint64_t n = 0;
    auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec == std::errc{} && ptr == value.data() + value.size()) return n;
  }
  return std::nullopt;
}

struct outgoing {
  std::string bytes;
  bool is_chunk = false;  // an SSE data event of the simulated work (counted in chunks_sent)
  bool last = false;      // the response's final write
  bool reset = false;     // with last: end the connection with RST, not FIN (mock-reset)
};

struct head_fields {
  unsigned status = 200;
  std::string_view content_type = "application/json";
  std::optional<std::size_t> content_length;  // nullopt: chunked
  std::vector<std::pair<std::string, std::string>> extra;
};

template <class Stream>
class session : public std::enable_shared_from_this<session<Stream>>, public watched_connection {
 public:
  session(Stream stream, stats_registry& stats, std::string_view path_prefix, peer_watch& watch)
      : stream_(std::move(stream)),
        stats_(stats),
        path_prefix_(path_prefix),
        watch_(watch),
        timer_(socket_of(stream_).get_executor()),
        ticket_(stats.connection_opened()) {
    new_parser();
  }

  ~session() override {
    watch_.remove(this);
    release_kv();
    stats_.connection_closed(ticket_);
  }

  int native_handle() override { return socket_of(stream_).native_handle(); }
  void peer_gone() override { client_gone(); }

  void start() {
    if constexpr (std::is_same_v<Stream, tls_stream>) {
      stream_.async_handshake(asio::ssl::stream_base::server,
                              [self = this->shared_from_this()](error_code ec) {
                                if (ec) return self->close();
                                self->do_read();
                              });
    } else {
      do_read();
    }
  }

 private:
  // ---- reading ---------------------------------------------------------------------------

  void new_parser() {
    parser_.emplace();
    parser_->header_limit(max_header_bytes);
    parser_->body_limit(max_body_bytes);
    parser_->eager(true);
    continue_sent_ = false;
  }

  void do_read() {
    if (reading_ || closed_) return;
    if (working_ && buffer_.size() >= buffered_limit) return;
    reading_ = true;
    stream_.async_read_some(
        buffer_.prepare(read_chunk_bytes),
        [self = this->shared_from_this()](error_code ec, std::size_t n) { self->on_read(ec, n); });
  }

  void on_read(error_code ec, std::size_t n) {
    reading_ = false;
    if (closed_ || (closing_after_stream_ && ec == asio::error::operation_aborted)) return;
    if (ec) return client_gone();
    buffer_.commit(n);
    if (!working_) parse_buffered();
    do_read();
  }

  void parse_buffered() {
    while (!working_ && !closed_ && buffer_.size() > 0) {
      error_code ec;
      auto used = parser_->put(buffer_.data(), ec);
      buffer_.consume(used);
      if (ec == http::error::need_more) {
        maybe_send_continue();
        return;
      }
      if (ec) return refuse(ec);
      if (parser_->is_done()) {
        auto request = parser_->release();
        new_parser();
        handle(std::move(request));
      } else if (used == 0) {
        return;
      }
    }
  }

  // curl and some SDKs wait for "100 Continue" before sending a large body.
  void maybe_send_continue() {
    if (continue_sent_ || !parser_->is_header_done()) return;
    auto& head = parser_->get();
    auto expect = head[http::field::expect];
    if (lower(expect) != "100-continue") return;
    continue_sent_ = true;
    enqueue({"HTTP/1.1 100 Continue\r\n\r\n", false, false});
  }

  // The request cannot be parsed: answer once, then close (the stream position is lost).
  void refuse(error_code ec) {
    unsigned status = 400;
    if (ec == http::error::body_limit) status = 413;
    if (ec == http::error::header_limit) status = 431;
    working_ = true;
    keep_alive_ = false;
    send_whole(status, error_body("mock could not parse the request", "invalid_request_error",
                                  "bad_request"));
  }

  void client_gone() {
    if (working_ && record_) {
      std::optional<double> owed;
      if (planned_end_) {
        auto left = std::chrono::duration<double, std::milli>(*planned_end_ - steady::now());
        owed = std::max(0.0, left.count());
      }
      record_->chunks_sent = chunks_sent_;
      stats_.request_closed_by_client(*record_, owed);
    }
    close();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    watch_.remove(this);
    release_kv();
    timer_.cancel();
    error_code ec;
    socket_of(stream_).shutdown(tcp::socket::shutdown_both, ec);
    socket_of(stream_).close(ec);
    stats_.connection_closed(ticket_);
  }

  // ---- routing ---------------------------------------------------------------------------

  void handle(http::request<http::string_body> request) {
    working_ = true;
    ++requests_on_connection_;
    keep_alive_ = request.keep_alive();
    planned_end_ = steady::now();
    chunks_sent_ = 0;
    streaming_ = false;

    std::string_view target = request.target();
    auto q = target.find('?');
    auto path = std::string(target.substr(0, q));
    auto query = q == std::string_view::npos ? std::string_view{} : target.substr(q + 1);
    const auto method = request.method();

    // A model server's health endpoint (vLLM's /health), outside the observed traffic: its
    // connections are not counted as the gateway's upstream connections.
    if (path == "/health" && method == http::verb::get) {
      if (requests_on_connection_ == 1) stats_.connection_is_control(ticket_);
      const auto status = stats_.health_check();
      return send_whole(status, status < 300 ? R"({"status":"ok"})" : R"({"status":"sick"})");
    }
    // A model server's own metrics, under llama.cpp's names: the requests it is working on now,
    // every client's (a gateway's and any other). Outside the observed traffic, as /health.
    if (path == "/metrics" && method == http::verb::get) {
      if (requests_on_connection_ == 1) stats_.connection_is_control(ticket_);
      watch_.settle();  // a client that already left is no longer worked for
      return send_whole(200, stats_.engine_metrics());
    }
    if (path == "/_health" && method == http::verb::post) {
      if (requests_on_connection_ == 1) stats_.connection_is_control(ticket_);
      const auto status = query_number(query, "status");
      if (!status || *status < 100 || *status > 599) {
        return send_whole(
            400, error_body("status=100..599 expected", "invalid_request_error", "bad_status"));
      }
      stats_.set_health_status(static_cast<unsigned>(*status));
      return send_whole(200, R"({"ok":true})");
    }
    // --sglang: SGLang's abort of a generation by its rid, and the test's switch for its answer.
    if (sglang_mode() && path == "/abort_request" && method == http::verb::post) {
      if (requests_on_connection_ == 1) stats_.connection_is_control(ticket_);
      const auto status = sglang_abort(request.body());
      return send_whole(status, status < 300 ? R"({"ok":true})" : R"({"error":"mock abort"})");
    }
    if (sglang_mode() && path == "/_abort_status" && method == http::verb::post) {
      if (requests_on_connection_ == 1) stats_.connection_is_control(ticket_);
      const auto status = query_number(query, "status");
      if (!status || *status < 100 || *status > 599) {
        return send_whole(
            400, error_body("status=100..599 expected", "invalid_request_error", "bad_status"));
      }
      set_sglang_abort_status(static_cast<unsigned>(*status));
      return send_whole(200, R"({"ok":true})");
    }
    if (path == "/_stats" || path == "/_reset") {
      if (requests_on_connection_ == 1) stats_.connection_is_control(ticket_);
      if (path == "/_stats" && method == http::verb::get) {
        return send_whole(200, stats_.to_json(query_number(query, "since")));
      }
      if (path == "/_reset" && method == http::verb::post) {
        stats_.reset();
        return send_whole(200, R"({"ok":true})");
      }
      return send_whole(
          405, error_body("method not allowed", "invalid_request_error", "method_not_allowed"));
    }
    // The log keeps the path as received, prefix included: what the test asserts on.
    const auto received_path = path;
    if (!path_prefix_.empty()) {
      if (path.rfind(path_prefix_, 0) != 0) {
        return send_whole(404, error_body("no such path", "invalid_request_error", "unknown_url"));
      }
      path.erase(0, path_prefix_.size());
    }
    if (path.rfind("/v1/", 0) != 0) {
      return send_whole(404, error_body("no such path", "invalid_request_error", "unknown_url"));
    }

    std::vector<std::pair<std::string, std::string>> headers;
    for (const auto& field : request.base()) {
      headers.emplace_back(lower(field.name_string()), std::string(field.value()));
    }
    // Closes that came before this request are counted before it, its own client's included.
    watch_.settle();
    if (peer_watch::has_gone(native_handle())) {
      auto record =
          stats_.request_started(ticket_, received_path, "", false, std::move(headers), true);
      error_code ec;
      const auto parsed = json::parse(request.body(), ec);
      const auto* object = ec ? nullptr : parsed.if_object();
      const auto* model = object != nullptr ? object->if_contains("model") : nullptr;
      if (model != nullptr && model->is_string()) {
        const auto* stream = object->if_contains("stream");
        stats_.set_model(*record, std::string(model->as_string()),
                         stream != nullptr && stream->is_bool() && stream->as_bool());
      }
      return close();
    }
    record_ = stats_.request_started(ticket_, received_path, "", false, std::move(headers));
    record_->query = std::string(query);
    watch_.add(this->shared_from_this());
    ctx_ = completion_context{};
    ctx_.request_id = record_->id;
    // Anthropic's paths answer even their routing errors in Anthropic's shape.
    if (path.rfind("/v1/messages", 0) == 0) ctx_.api = api_kind::messages;

    if (path == "/v1/models" && method == http::verb::get) return send_whole(200, models_body());
    if (method != http::verb::post) return send_error(404, "no such path", "unknown_url");
    if (path == "/v1/chat/completions") {
      ctx_.api = api_kind::chat;
    } else if (path == "/v1/completions") {
      ctx_.api = api_kind::completion;
    } else if (path == "/v1/embeddings") {
      ctx_.api = api_kind::embedding;
    } else if (path == "/v1/responses") {
      ctx_.api = api_kind::responses;
    } else if (path == "/v1/messages") {
      ctx_.api = api_kind::messages;
    } else if (path == "/v1/messages/count_tokens") {
      ctx_.api = api_kind::count_tokens;
    } else {
      return send_error(404, "no such path", "unknown_url");
    }
    handle_model_request(request.body());
  }

  void handle_model_request(const std::string& body) {
    error_code ec;
    auto parsed = json::parse(body, ec);
    const auto* object = ec ? nullptr : parsed.if_object();
    if (object == nullptr) {
      return send_error(400, "request body is not a JSON object", "invalid_json");
    }
    const auto* model = object->if_contains("model");
    if (model == nullptr || !model->is_string()) {
      return send_error(400, "missing model", "missing_model");
    }
    model_ = std::string(model->as_string());
    const auto* stream = object->if_contains("stream");
    // Embeddings and count_tokens have no streaming form: their `stream` is ignored.
    streaming_ = ctx_.api != api_kind::embedding && ctx_.api != api_kind::count_tokens &&
                 stream != nullptr && stream->is_bool() && stream->as_bool();
    stats_.set_model(*record_, model_, streaming_);
    if (const auto* options = object->if_contains("stream_options");
        options && options->is_object()) {
      const auto* usage = options->as_object().if_contains("include_usage");
      ctx_.include_usage = usage != nullptr && usage->is_bool() && usage->as_bool();
    }
    rid_.clear();
    if (const auto* rid = object->if_contains("rid"); rid && rid->is_string() && sglang_mode())
      rid_ = std::string(rid->as_string());
    ctx_.model = model_;
    ctx_.prompt_bytes = body.size();
    embedding_inputs_ = 1;
    if (const auto* input = object->if_contains("input")) {
      embedding_inputs_ = embedding_input_count(*input);
    }

    auto b = parse_behaviour(model_);
    if (!b) {
      return send_error(404, "The model `" + model_ + "` does not exist", "model_not_found");
    }
    switch (b->kind) {
      case behaviour_kind::immediate:
        return answer();
      case behaviour_kind::delay:
        return answer_after(b->delay);
      case behaviour_kind::stream:
        stream_linger_ = b->linger;
        if (streaming_) return start_stream(b->chunks, b->delay, b->stamped);
        return answer_after(b->delay * b->chunks);
      case behaviour_kind::fail:
        return send_error(b->status, "mock failure", "mock_fail_" + std::to_string(b->status),
                          "mock_error");
      case behaviour_kind::rate_limit:
        return send_error(429, "mock rate limit", "rate_limit_exceeded", "rate_limit_error",
                          {{"retry-after", std::to_string(b->retry_after_seconds)}});
      case behaviour_kind::hang:
        planned_end_.reset();  // unbounded: work_owed_ms is null
        return;
      case behaviour_kind::flaky:
        if (flaky_request_fails(stats_.next_flaky_index(model_), b->percent)) {
          return send_error(503, "mock flaky failure", "mock_flaky_503", "mock_error");
        }
        return answer();
      case behaviour_kind::bad_status:
        return send_and_close("HTTP/1.1 2x0 Hostile Status\r\ncontent-length: 0\r\n\r\n");
      case behaviour_kind::garbage:
        return send_whole(200, "<html>this is not JSON</html>\n{\"choices\": [{\"message\"");
      case behaviour_kind::truncated:
        return send_truncated();
      case behaviour_kind::sse_cut:
      case behaviour_kind::bad_chunk:
      case behaviour_kind::reset:
        broken_ = b->kind;
        return start_stream(hostile_stream_events, hostile_stream_interval);
      case behaviour_kind::huge:
        return send_whole(200, padded_completion_body(ctx_, b->mebibytes * mebibyte));
      case behaviour_kind::drip:
        return start_drip(b->delay);
      case behaviour_kind::drop:
        // The request was read and may have been worked on: what a server that crashes mid-work
        // leaves its client with. No response byte precedes the reset.
        keep_alive_ = false;
        return enqueue({std::string(), false, true, true});
      case behaviour_kind::kv: {
        const auto demand = kv_demand(body.size(), requested_output_limit(*object));
        if (!stats_.kv().try_hold(b->kv_budget_tokens, demand)) {
          return send_error(503,
                            "mock KV cache full: " + std::to_string(demand) +
                                " tokens do not fit in " + std::to_string(b->kv_budget_tokens),
                            "mock_kv_over_budget", "mock_error");
        }
        kv_hold_ = {b->kv_budget_tokens, demand};
        return answer_after(b->delay);
      }
    }
  }

  // A kv request's tokens come back when its answer starts (the work is done) or its connection
  // ends, whichever is first; before the answer's bytes leave, so a client that sends its next
  // request on seeing the answer finds them free.
  void release_kv() {
    if (!kv_hold_) return;
    stats_.kv().release(kv_hold_->budget, kv_hold_->demand);
    kv_hold_.reset();
  }

  // ---- answers ---------------------------------------------------------------------------

  void answer_after(std::chrono::milliseconds delay) {
    // --sglang: the generation outlives a non-streaming client's close, as SGLang's does.
    if (!rid_.empty() && !streaming_)
      sglang_generation_started(socket_of(stream_).get_executor(), rid_, delay);
    planned_end_ = steady::now() + delay;
    timer_.expires_at(*planned_end_);
    timer_.async_wait([self = this->shared_from_this()](error_code ec) {
      if (ec || self->closed_) return;
      self->answer();
    });
  }

  // The successful answer of a model request, whole or as a one-event stream.
  void answer() {
    release_kv();
    if (ctx_.api == api_kind::embedding) {
      return send_whole(200, embeddings_body(ctx_, embedding_inputs_));
    }
    if (!streaming_) return send_whole(200, completion_body(ctx_));
    send_stream_head();
    enqueue({chunk_frame(stream_piece_events(ctx_, 0, 1)), true, false});
    enqueue({stream_end_and_last_chunk(ctx_), false, true});
  }

  void start_stream(std::uint32_t chunks, std::chrono::milliseconds interval,
                    bool stamped = false) {
    stream_start_ = steady::now();
    stream_chunks_ = chunks;
    stream_interval_ = interval;
    stream_stamped_ = stamped;
    planned_end_ = stream_start_ + interval * chunks;
    send_stream_head();
    schedule_tick(0);
  }

  // Event k is due at start + (k+1)·interval, on an absolute schedule so write time never drifts
  // it.
  void schedule_tick(std::uint32_t k) {
    timer_.expires_at(stream_start_ + stream_interval_ * (k + 1));
    timer_.async_wait([self = this->shared_from_this(), k](error_code ec) {
      if (ec || self->closed_) return;
      // Stamped as it is handed to the socket: an outbox still holding earlier events (a relay
      // that does not read) delays it, which is the relay's lag too.
      // A broken stream breaks before its answer's end: its pieces are those of a longer answer,
      // so none carries the closing events (response.completed, message_stop).
      const auto count = self->broken_ ? self->stream_chunks_ + 1 : self->stream_chunks_;
      auto event = self->stream_stamped_
                       ? stamped_stream_piece_events(self->ctx_, k, count, epoch_us_now())
                       : stream_piece_events(self->ctx_, k, count);
      self->enqueue({chunk_frame(event), true, false});
      if (k + 1 == self->stream_chunks_) {
        if (self->broken_) return self->schedule_break();
        if (self->stream_linger_.count() > 0) return self->schedule_linger();
        self->enqueue({stream_end_and_last_chunk(self->ctx_), false, true});
      } else {
        self->schedule_tick(k + 1);
      }
    });
  }

  // The answer's last events now (on the Responses and Messages APIs they came with its last
  // piece), the body's end a linger later.
  void schedule_linger() {
    if (auto end = stream_end_events(ctx_); !end.empty()) enqueue({chunk_frame(end), false, false});
    planned_end_ = steady::now() + stream_linger_;
    timer_.expires_at(*planned_end_);
    timer_.async_wait([self = this->shared_from_this()](error_code ec) {
      if (ec || self->closed_) return;
      self->enqueue({"0\r\n\r\n", false, true});
    });
  }

  // The broken streams break one interval after their last whole event.
  void schedule_break() {
    planned_end_ = stream_start_ + stream_interval_ * (stream_chunks_ + 1);
    timer_.expires_at(*planned_end_);
    timer_.async_wait([self = this->shared_from_this()](error_code ec) {
      if (ec || self->closed_) return;
      self->keep_alive_ = false;
      switch (*self->broken_) {
        case behaviour_kind::sse_cut:
          // A whole chunk holding half an SSE event, and no last chunk.
          return self->enqueue({chunk_frame(half_stream_event(self->ctx_)), false, true});
        case behaviour_kind::bad_chunk:
          return self->enqueue({"zz; not a chunk size\r\ngarbage\r\n", false, true});
        default:
          return self->enqueue({std::string(), false, true, true});
      }
    });
  }

  // Body bytes one at a time: a whole completion (Content-Length) or, for a streaming request,
  // one event and [DONE] with a chunk per byte.
  void start_drip(std::chrono::milliseconds interval) {
    head_fields head;
    if (streaming_) {
      head.content_type = "text/event-stream";
      drip_body_ = stream_piece_events(ctx_, 0, 1) + std::string(stream_end_events(ctx_));
    } else {
      drip_body_ = ctx_.api == api_kind::embedding ? embeddings_body(ctx_, embedding_inputs_)
                                                   : completion_body(ctx_);
      head.content_length = drip_body_.size();
    }
    stream_start_ = steady::now();
    stream_interval_ = interval;
    planned_end_ = stream_start_ + interval * static_cast<std::int64_t>(drip_body_.size());
    enqueue({format_head(head), false, false});
    schedule_drip(0);
  }

  void schedule_drip(std::size_t i) {
    timer_.expires_at(stream_start_ + stream_interval_ * static_cast<std::int64_t>(i + 1));
    timer_.async_wait([self = this->shared_from_this(), i](error_code ec) {
      if (ec || self->closed_) return;
      auto byte = self->drip_body_.substr(i, 1);
      const bool last = i + 1 == self->drip_body_.size();
      if (self->streaming_) {
        self->enqueue({chunk_frame(byte), false, false});
        if (last) self->enqueue({"0\r\n\r\n", false, true});
      } else {
        self->enqueue({std::move(byte), false, last});
      }
      if (!last) self->schedule_drip(i + 1);
    });
  }

  // Content-Length promises more than is sent; the connection then closes.
  void send_truncated() {
    auto body = completion_body(ctx_);
    head_fields head;
    head.content_length = body.size() + truncated_missing_bytes;
    keep_alive_ = false;
    auto bytes = format_head(head);
    bytes.append(body);
    enqueue({std::move(bytes), false, true});
  }

  // Bytes that are not a well-formed response; the connection then closes.
  void send_and_close(std::string bytes) {
    keep_alive_ = false;
    enqueue({std::move(bytes), false, true});
  }

  void send_stream_head() {
    head_fields head;
    head.content_type = "text/event-stream";
    head.extra.emplace_back("cache-control", "no-cache");
    enqueue({format_head(head), false, false});
  }

  // An error in the shape of the request's API; type and code are OpenAI's fields (Anthropic's
  // type follows from the status).
  void send_error(unsigned status, std::string_view message, std::string_view code,
                  std::string_view type = "invalid_request_error",
                  std::vector<std::pair<std::string, std::string>> extra = {}) {
    send_whole(status, error_body_for(ctx_, status, message, type, code), std::move(extra));
  }

  void send_whole(unsigned status, std::string body,
                  std::vector<std::pair<std::string, std::string>> extra = {}) {
    head_fields head;
    head.status = status;
    head.content_length = body.size();
    head.extra = std::move(extra);
    auto bytes = format_head(head);
    bytes.append(body);
    enqueue({std::move(bytes), false, true});
  }

  std::string format_head(const head_fields& head) {
    if (record_) record_->status = head.status;
    std::string out = "HTTP/1.1 " + std::to_string(head.status) + " ";
    out.append(http::obsolete_reason(http::int_to_status(head.status)));
    out.append("\r\nserver: tether-mock\r\ncontent-type: ").append(head.content_type);
    if (head.content_length) {
      out.append("\r\ncontent-length: ").append(std::to_string(*head.content_length));
    } else {
      out.append("\r\ntransfer-encoding: chunked");
    }
    chunked_response_ = !head.content_length.has_value();
    if (record_) out.append("\r\nx-mock-request-id: ").append(std::to_string(record_->id));
    for (const auto& [name, value] : head.extra) out.append("\r\n" + name + ": " + value);
    if (!keep_alive_) out.append("\r\nconnection: close");
    out.append("\r\n\r\n");
    return out;
  }

  // As llama-server after a streamed answer (bench/mock/stream_close.hpp): nothing more is read,
  // so a request sent meanwhile stays in the kernel, unread, and the close resets it.
  void close_after_stream_ends() {
    closing_after_stream_ = true;
    error_code ignored;
    socket_of(stream_).cancel(ignored);
    timer_.expires_after(*close_after_stream());
    timer_.async_wait([self = this->shared_from_this()](error_code ec) {
      if (ec || self->closed_) return;
      self->close();
    });
  }

  // ---- writing ---------------------------------------------------------------------------

  void enqueue(outgoing item) {
    outbox_.push_back(std::move(item));
    if (!writing_) do_write();
  }

  void do_write() {
    if (closed_ || outbox_.empty()) return;
    writing_ = true;
    asio::async_write(
        stream_, asio::buffer(outbox_.front().bytes),
        [self = this->shared_from_this()](error_code ec, std::size_t) { self->on_write(ec); });
  }

  void on_write(error_code ec) {
    writing_ = false;
    if (closed_) return;
    if (ec) return client_gone();
    auto item = std::move(outbox_.front());
    outbox_.pop_front();
    if (item.is_chunk) {
      ++chunks_sent_;
      if (record_) {
        record_->chunks_sent = chunks_sent_;
        record_->last_chunk_ms = epoch_ms_now();
      }
    }
    if (item.last) return finish_response(item.reset);
    do_write();
  }

  void finish_response(bool reset = false) {
    if (record_) {
      record_->chunks_sent = chunks_sent_;
      stats_.request_completed(*record_);
    }
    record_.reset();
    watch_.remove(this);
    working_ = false;
    broken_.reset();
    if (reset) {
      // SO_LINGER 0 makes close() send RST; no shutdown first, which would send a FIN.
      error_code ignored;
      socket_of(stream_).set_option(asio::socket_base::linger(true, 0), ignored);
      closed_ = true;
      timer_.cancel();
      socket_of(stream_).close(ignored);
      stats_.connection_closed(ticket_);
      return;
    }
    if (!keep_alive_) {
      error_code ignored;
      socket_of(stream_).shutdown(tcp::socket::shutdown_send, ignored);
      return close();
    }
    if (chunked_response_ && close_after_stream()) return close_after_stream_ends();
    parse_buffered();
    do_read();
  }

  Stream stream_;
  stats_registry& stats_;
  std::string_view path_prefix_;
  peer_watch& watch_;
  asio::steady_timer timer_;
  connection_ticket ticket_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::deque<outgoing> outbox_;
  bool reading_ = false;
  bool writing_ = false;
  bool working_ = false;
  bool closed_ = false;
  bool keep_alive_ = true;
  bool continue_sent_ = false;
  bool chunked_response_ = false;      // the answer being written is chunked (a stream)
  bool closing_after_stream_ = false;  // --close-after-stream: reads are over
  std::uint64_t requests_on_connection_ = 0;

  // The request being worked on.
  std::shared_ptr<request_record> record_;
  completion_context ctx_;
  std::string model_;
  std::string rid_;  // --sglang: the body's rid
  bool streaming_ = false;
  std::size_t embedding_inputs_ = 1;
  std::optional<steady::time_point> planned_end_;  // nullopt: never (mock-hang)
  steady::time_point stream_start_;
  std::uint32_t stream_chunks_ = 0;
  std::chrono::milliseconds stream_interval_{0};
  std::chrono::milliseconds stream_linger_{0};
  bool stream_stamped_ = false;
  std::uint32_t chunks_sent_ = 0;
  std::optional<behaviour_kind> broken_;  // sse_cut, bad_chunk or reset: how the stream ends
  std::string drip_body_;
  struct kv_hold {
    std::uint64_t budget = 0;
    std::uint64_t demand = 0;
  };
  std::optional<kv_hold> kv_hold_;  // a kv request's demand, held until release_kv()
};

}  // namespace

void start_plain_session(tcp::socket socket, stats_registry& stats, std::string_view path_prefix,
                         peer_watch& watch) {
  error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  std::make_shared<session<tcp::socket>>(std::move(socket), stats, path_prefix, watch)->start();
}

void start_tls_session(tcp::socket socket, asio::ssl::context& tls, stats_registry& stats,
                       std::string_view path_prefix, peer_watch& watch) {
  error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  std::make_shared<session<tls_stream>>(tls_stream(std::move(socket), tls), stats, path_prefix,
                                        watch)
      ->start();
}

}  // namespace tether::mock
