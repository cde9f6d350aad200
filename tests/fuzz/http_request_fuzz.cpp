// The downstream request path without its socket: net::downstream_request_parser with the
// limits the server uses (config defaults), the framing checks net/downstream_session.cpp applies
// after the header (net/request_framing.hpp: field count, duplicate Content-Length,
// Content-Length with Transfer-Encoding, Transfer-Encoding not ending in chunked), then, for a
// model request, the body inspection and
// model rewrite the gateway applies. Pipelined requests are parsed one after another. Each
// request is parsed by Beast's request_parser<string_body> as well, which runs the same
// basic_parser: the two must agree on every outcome (error, bytes used, method, target, version,
// keep-alive, the header fields and the counts the checks use, the body).
//
// The real downstream_session is not driven here: it needs a connected socket, a strand and the
// gateway's handler (an actor system), which would make each run milliseconds, not
// microseconds. The framing checks are the session's own function, called here as it calls them.
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

#include "actors/policy/wire/model_request.hpp"
#include "config/config.hpp"
#include "net/buffered_parse.hpp"
#include "net/downstream_request_parser.hpp"
#include "net/request_framing.hpp"
#include "tests/fuzz/fuzz_check.hpp"
#include "tests/fuzz/same_fields.hpp"

namespace {

namespace http = boost::beast::http;

const tether::config::server_config limits{};

bool is_model_path(std::string_view target) {
  return target == "/v1/chat/completions" || target == "/v1/completions" ||
         target == "/v1/embeddings";
}

// Beast's parser over the same bytes, the same way: the reference for tether's.
struct reference {
  http::request_parser<http::string_body> parser;
  boost::system::error_code ec;
  std::size_t used = 0;
};

void limit_head(tether::net::downstream_request_parser& parser, std::uint32_t bytes) {
  parser.limit_head(bytes);
}
template <class Parser>
void limit_head(Parser& parser, std::uint32_t bytes) {
  parser.header_limit(bytes);
}

template <class Parser>
void configure(Parser& parser) {
  limit_head(parser, static_cast<std::uint32_t>(limits.max_header_bytes));
  parser.body_limit(limits.max_request_bytes);
  parser.eager(false);  // stop after the header, as async_read_header does
}

// Feeds `input` from `used` until `done` holds or the parser stops; returns false when it stops
// short (error or bytes spent).
template <class Parser, class Done>
bool feed(Parser& parser, std::string_view input, std::size_t& used, boost::system::error_code& ec,
          Done done) {
  while (!done()) {
    const auto n = parser.put(boost::asio::buffer(input.data() + used, input.size() - used), ec);
    used += n;
    if (ec || n == 0) return false;
  }
  return true;
}

// Feeds tether's parser and Beast's until `done` holds for each; both must stop alike. Returns
// whether tether's got there. tether's reads a whole head as the session does (put_scanned_head:
// scanned, Beast given only its start line and framing fields), else as Beast reads it.
template <class Done>
bool feed_both(tether::net::downstream_request_parser& parser, reference& ref,
               std::string_view input, std::size_t& used, boost::system::error_code& ec,
               Done done) {
  bool scanned_error = false;
  if (const auto head = tether::net::put_scanned_head(parser, input.substr(used), ec)) {
    used += *head;
    scanned_error = static_cast<bool>(ec);
  }
  const bool ours = !scanned_error && feed(parser, input, used, ec, [&] { return done(parser); });
  const bool theirs = feed(ref.parser, input, ref.used, ref.ec, [&] { return done(ref.parser); });
  TETHER_FUZZ_CHECK(ours == theirs);
  TETHER_FUZZ_CHECK(ec == ref.ec);
  // Where an error stopped Beast within a head is not where the scan stopped (after it); the
  // session closes the connection on either, so only a success's count must agree.
  if (!scanned_error) TETHER_FUZZ_CHECK(used == ref.used);
  return ours;
}

// tether's parser agrees with Beast's on the head.
void check_head(tether::net::downstream_request_parser& ours, reference& ref) {
  const auto& message = ref.parser.get();
  TETHER_FUZZ_CHECK(ours.method() == message.method());
  TETHER_FUZZ_CHECK(ours.method_string() == message.method_string());
  TETHER_FUZZ_CHECK(ours.target() == message.target());
  TETHER_FUZZ_CHECK(ours.version() == static_cast<int>(message.version()));
  TETHER_FUZZ_CHECK(ours.keep_alive() == ref.parser.keep_alive());
  TETHER_FUZZ_CHECK(ours.content_lengths() == message.count(http::field::content_length));
  TETHER_FUZZ_CHECK(ours.transfer_encodings() == message.count(http::field::transfer_encoding));
  TETHER_FUZZ_CHECK(ours.expects_continue() ==
                    boost::beast::iequals(message[http::field::expect], "100-continue"));
  tether::fuzz::check_same_fields(ours.headers(), message);
}

// Parses one request from the front of `input`; returns the bytes it used, or 0 when the
// connection would end here (refused, incomplete or malformed).
std::size_t one_request(std::string_view input) {
  tether::net::downstream_request_parser parser;
  configure(parser);
  reference ref;
  configure(ref.parser);
  boost::system::error_code ec;
  std::size_t used = 0;
  const bool head =
      feed_both(parser, ref, input, used, ec, [](auto& p) { return p.is_header_done(); });
  if (!head) return 0;  // refused (4xx) or incomplete: the connection ends
  check_head(parser, ref);
  if (tether::net::check_request_framing(parser, limits.max_header_fields) !=
      tether::net::framing_fault::none) {
    return 0;  // refused: the connection ends
  }
  const auto lengths = parser.content_lengths();

  parser.eager(true);
  ref.parser.eager(true);
  const bool whole = feed_both(parser, ref, input, used, ec, [](auto& p) { return p.is_done(); });
  TETHER_FUZZ_CHECK(parser.body() == ref.parser.get().body());
  if (!whole) return 0;  // malformed, over the limit, or the client went quiet
  TETHER_FUZZ_CHECK(used <= input.size());
  const auto& body = parser.body();
  TETHER_FUZZ_CHECK(body.size() <= limits.max_request_bytes);
  if (lengths == 1) {
    TETHER_FUZZ_CHECK(parser.content_length().has_value() || body.empty());
  }

  if (parser.method() == http::verb::post && is_model_path(parser.target())) {
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
  return parser.keep_alive() ? used : 0;
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
