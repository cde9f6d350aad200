// The upstream response parser (net/upstream_response_parser.hpp) against Beast's own
// response_parser<dynamic_body> on the same bytes: both run Beast's basic_parser, so they must
// agree on every outcome — error or not, status, version, the header fields (names lower-cased
// by tether's), the body, the bytes used — while tether's writes its body through a small buffer
// refilled as the session refills its own.
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/http/dynamic_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "net/buffered_parse.hpp"
#include "net/upstream_response_parser.hpp"
#include "tests/fuzz/fuzz_check.hpp"
#include "tests/fuzz/same_fields.hpp"

namespace {

namespace http = boost::beast::http;

constexpr std::uint32_t header_limit = 16 * 1024;

struct outcome {
  boost::system::error_code ec;
  std::size_t used = 0;
  bool done = false;
  bool scanned = false;  // the head went through put_scanned_head
};

template <class Parser, class Refill, class Drain>
outcome run(Parser& parser, std::string_view input, Refill refill, Drain drain) {
  outcome out;
  constexpr bool ours = std::is_same_v<Parser, tether::net::upstream_response_parser>;
  if constexpr (ours) {
    parser.limit_head(header_limit);
  } else {
    parser.header_limit(header_limit);
  }
  // None, as upstream_session sets it (the caller enforces max_response_bytes). With a limit,
  // Beast charges a body read to the end of the connection for the bytes it presents, not those
  // the body takes, so a small buffer would exhaust it sooner than Beast's own body does.
  // (dynamic_body on Beast's side: string_body reserves the declared Content-Length.)
  parser.body_limit(boost::none);
  parser.eager(true);
  if constexpr (ours) {
    // A whole head is read as the session reads it: scanned, Beast given only its status line
    // and framing fields.
    if (const auto head = tether::net::put_scanned_head(parser, input, out.ec)) {
      out.used = *head;
      out.scanned = true;
      if (out.ec) return out;
    }
  }
  while (!parser.is_done() && out.used < input.size()) {
    refill();
    const auto n =
        parser.put(boost::asio::buffer(input.data() + out.used, input.size() - out.used), out.ec);
    out.used += n;
    drain();
    if (out.ec == http::error::need_buffer) out.ec = {};
    if (out.ec) break;
    if (n == 0) break;  // need_more and the input is spent
  }
  out.done = parser.is_done();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  // The first byte sizes the body buffer (1..256 bytes), the rest is the response.
  const std::size_t space = static_cast<std::size_t>(data[0]) + 1;
  std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);

  http::response_parser<http::dynamic_body> beast;
  const auto expected = run(
      beast, input, [] {}, [] {});

  tether::net::upstream_response_parser ours;
  std::string buffer(space, '\0');
  std::string body;
  const auto got = run(
      ours, input,
      [&] {
        ours.body() = {buffer.data(), buffer.size()};
      },
      [&] { body.append(buffer.data(), buffer.size() - ours.body().size); });

  TETHER_FUZZ_CHECK(got.ec == expected.ec);
  TETHER_FUZZ_CHECK(got.done == expected.done);
  // Where an error stopped Beast within a head is not where the scan stopped (after it); the
  // session fails the exchange on either, so only a success's count must agree.
  if (!(got.scanned && got.ec)) TETHER_FUZZ_CHECK(got.used == expected.used);
  TETHER_FUZZ_CHECK(ours.is_header_done() == beast.is_header_done());
  if (!ours.is_header_done()) return 0;
  const auto& head = beast.get();
  TETHER_FUZZ_CHECK(ours.status() == static_cast<int>(head.result_int()));
  TETHER_FUZZ_CHECK(ours.version() == static_cast<int>(head.version()));
  TETHER_FUZZ_CHECK(ours.keep_alive() == beast.keep_alive());
  tether::fuzz::check_same_fields(ours.headers(), head);
  TETHER_FUZZ_CHECK(body == boost::beast::buffers_to_string(beast.get().body().data()));
  return 0;
}
