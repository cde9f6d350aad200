// The downstream request path without its socket: Beast's request_parser with the limits the
// server uses (config defaults), the framing checks net/downstream_session.cpp applies after the
// header (field count, duplicate Content-Length, Content-Length with Transfer-Encoding,
// Transfer-Encoding not ending in chunked), then, for a model request, the body inspection and
// model rewrite the gateway applies. Pipelined requests are parsed one after another.
//
// The real downstream_session is not driven here: it needs a connected socket, a strand and the
// gateway's handler (an actor system), which would make each run milliseconds, not
// microseconds. The checks below mirror on_read_header; keep them in step with it.
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

#include "actors/policy/model_request.hpp"
#include "config/config.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {

namespace http = boost::beast::http;

const tether::config::server_config limits{};

bool is_model_path(std::string_view target) {
  return target == "/v1/chat/completions" || target == "/v1/completions" ||
         target == "/v1/embeddings";
}

// Parses one request from the front of `input`; returns the bytes it used, or 0 when the
// connection would end here (refused, incomplete or malformed).
std::size_t one_request(std::string_view input) {
  http::request_parser<http::string_body> parser;
  parser.header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
  parser.body_limit(limits.max_request_bytes);
  parser.eager(false);  // stop after the header, as async_read_header does
  boost::system::error_code ec;
  std::size_t used = 0;
  while (!parser.is_header_done()) {
    const auto n = parser.put(boost::asio::buffer(input.data() + used, input.size() - used), ec);
    used += n;
    if (ec || n == 0) return 0;  // refused (4xx) or incomplete: the connection ends
  }
  const auto& message = parser.get();
  const auto fields = static_cast<std::size_t>(std::distance(message.begin(), message.end()));
  if (fields > limits.max_header_fields) return 0;
  const auto lengths = message.count(http::field::content_length);
  const auto encodings = message.count(http::field::transfer_encoding);
  if (lengths > 1 || (lengths > 0 && encodings > 0)) return 0;
  if (encodings > 0 && !parser.chunked()) return 0;

  parser.eager(true);
  while (!parser.is_done()) {
    const auto n = parser.put(boost::asio::buffer(input.data() + used, input.size() - used), ec);
    used += n;
    if (ec == http::error::need_more || (!ec && n == 0)) return 0;  // the client went quiet
    if (ec) return 0;
  }
  TETHER_FUZZ_CHECK(used <= input.size());
  const auto& request = parser.get();
  const auto& body = request.body();
  TETHER_FUZZ_CHECK(body.size() <= limits.max_request_bytes);
  if (lengths == 1) {
    TETHER_FUZZ_CHECK(parser.content_length().has_value() || body.empty());
  }

  if (request.method() == http::verb::post && is_model_path(request.target())) {
    auto inspected = tether::inspect_model_request(body, limits.max_json_depth);
    if (const auto* info = std::get_if<tether::model_request_info>(&inspected)) {
      const auto rewritten = tether::rewrite_model(body, "upstream/model");
      auto again = tether::inspect_model_request(rewritten, limits.max_json_depth);
      const auto* info2 = std::get_if<tether::model_request_info>(&again);
      TETHER_FUZZ_CHECK(info2 != nullptr);
      TETHER_FUZZ_CHECK(info2->model == "upstream/model");
      TETHER_FUZZ_CHECK(info2->stream == info->stream);
    }
  }
  // A request that does not keep the connection alive is the last one read.
  return request.keep_alive() ? used : 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  for (int i = 0; i < 16 && !input.empty(); ++i) {
    const auto used = one_request(input);
    if (used == 0) break;
    input.remove_prefix(used);
  }
  return 0;
}
