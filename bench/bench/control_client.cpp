#include "bench/bench/control_client.hpp"

#include <stdexcept>

#include <boost/asio/io_context.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json/parse.hpp>

namespace tether::bench {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using error_code = boost::system::error_code;

}  // namespace

std::optional<http_reply> http_call(const asio::ip::tcp::endpoint& target,
                                    const std::string& method, const std::string& path,
                                    std::chrono::milliseconds timeout) {
  // A private io_context: the call is bounded by run_for whatever the peer does.
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::flat_buffer buffer;
  http::request<http::string_body> req{http::string_to_verb(method), path, 11};
  req.set(http::field::host, target.address().to_string());
  req.set(http::field::connection, "close");
  req.prepare_payload();
  http::response_parser<http::string_body> parser;
  parser.body_limit(256 * 1024 * 1024);
  std::optional<http_reply> reply;
  stream.expires_after(timeout);
  stream.async_connect(target, [&](error_code ec) {
    if (ec) return;
    http::async_write(stream, req, [&](error_code ec2, std::size_t) {
      if (ec2) return;
      http::async_read(stream, buffer, parser, [&](error_code ec3, std::size_t) {
        if (ec3) return;
        reply = http_reply{parser.get().result_int(), std::move(parser.get().body())};
      });
    });
  });
  ioc.run_for(timeout + std::chrono::milliseconds(100));
  return reply;
}

bool mock_control::reset() const {
  auto r = http_call(mock_, "POST", "/_reset");
  return r && r->status == 200;
}

boost::json::value mock_control::stats() const {
  auto r = http_call(mock_, "GET", "/_stats", std::chrono::seconds(30));
  if (!r || r->status != 200) throw std::runtime_error("cannot read the mock's /_stats");
  return boost::json::parse(r->body);
}

boost::json::value mock_control::counters() const {
  // No request has an id this large: the log comes back empty.
  auto r = http_call(mock_, "GET", "/_stats?since=18446744073709551615");
  if (!r || r->status != 200) throw std::runtime_error("cannot read the mock's /_stats");
  return boost::json::parse(r->body);
}

}  // namespace tether::bench
