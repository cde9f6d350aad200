// The upstream response parser: the head as tether passes it on, the body into the caller's
// buffer a piece at a time, and Beast's own errors for what is malformed.
#include "net/upstream_response_parser.hpp"

#include <gtest/gtest.h>

#include <boost/asio/buffer.hpp>
#include <string>
#include <string_view>

namespace tether::net {
namespace {

namespace http = boost::beast::http;

// Feeds `wire` to `parser`, with a body buffer of `space` bytes that is emptied into the result
// whenever it fills; stops at the end of the message, on an error or when the input is spent.
struct parsed {
  boost::beast::error_code ec;
  std::string body;
  std::size_t used = 0;
};
parsed parse(upstream_response_parser& parser, std::string_view wire, std::size_t space = 7) {
  parsed out;
  std::string buffer(space, '\0');
  parser.eager(true);
  while (!parser.is_done() && out.used < wire.size()) {
    parser.body() = {buffer.data(), buffer.size()};
    const auto n =
        parser.put(boost::asio::buffer(wire.data() + out.used, wire.size() - out.used), out.ec);
    out.used += n;
    out.body.append(buffer.data(), buffer.size() - parser.body().size);
    if (out.ec == http::error::need_buffer) out.ec = {};
    if (out.ec) break;
  }
  return out;
}

TEST(UpstreamResponseParserTest, KeepsTheHeadWithLowerCaseNamesInOrder) {
  upstream_response_parser parser;
  const auto r = parse(parser,
                       "HTTP/1.1 201 Created\r\nContent-Type: text/event-stream\r\n"
                       "X-Request-ID: abc\r\nx-request-id: def\r\nContent-Length: 0\r\n\r\n");
  ASSERT_FALSE(r.ec) << r.ec.message();
  ASSERT_TRUE(parser.is_done());
  EXPECT_EQ(parser.status(), 201);
  EXPECT_EQ(parser.version(), 11);
  ASSERT_EQ(parser.headers().size(), 4u);
  EXPECT_EQ(parser.headers()[0].name, "content-type");
  EXPECT_EQ(parser.headers()[0].value, "text/event-stream");
  EXPECT_EQ(parser.headers()[1].name, "x-request-id");
  EXPECT_EQ(parser.headers()[1].value, "abc");
  EXPECT_EQ(parser.headers()[2].value, "def");
  EXPECT_EQ(parser.headers()[3].name, "content-length");
  EXPECT_TRUE(parser.keep_alive());
}

TEST(UpstreamResponseParserTest, WritesALengthDelimitedBodyThroughASmallBuffer) {
  upstream_response_parser parser;
  const std::string body = R"({"id":"chatcmpl-1","choices":[]})";
  const auto r = parse(parser, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                                   "\r\n\r\n" + body);
  ASSERT_FALSE(r.ec) << r.ec.message();
  EXPECT_TRUE(parser.is_done());
  EXPECT_EQ(r.body, body);
}

TEST(UpstreamResponseParserTest, WritesAChunkedBodyAndLeavesWhatFollowsTheMessage) {
  upstream_response_parser parser;
  const std::string wire =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
      "6\r\ndata: \r\n3;ext=1\r\n{}\n\r\n0\r\n\r\n";
  const auto r = parse(parser, wire + "HTTP/1.1 200 OK\r\n");
  ASSERT_FALSE(r.ec) << r.ec.message();
  EXPECT_TRUE(parser.is_done());
  EXPECT_TRUE(parser.chunked());
  EXPECT_EQ(r.body, "data: {}\n");
  EXPECT_EQ(r.used, wire.size());  // the next response's bytes stay in the buffer
}

TEST(UpstreamResponseParserTest, StopsWithNeedBufferWhenNoSpaceIsGiven) {
  upstream_response_parser parser;
  parser.eager(true);
  const std::string wire = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
  boost::beast::error_code ec;
  const auto n = parser.put(boost::asio::buffer(wire), ec);
  EXPECT_EQ(ec, http::error::need_buffer);
  EXPECT_TRUE(parser.is_header_done());
  EXPECT_FALSE(parser.is_done());
  EXPECT_EQ(n, wire.size() - 5);  // the head only
}

TEST(UpstreamResponseParserTest, AnHttp10ResponseEndedByTheConnectionIsNotKeptAlive) {
  upstream_response_parser parser;
  auto r = parse(parser, "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{}");
  ASSERT_FALSE(r.ec) << r.ec.message();
  EXPECT_EQ(parser.version(), 10);
  EXPECT_TRUE(parser.need_eof());
  EXPECT_FALSE(parser.keep_alive());
  boost::beast::error_code ec;
  parser.put_eof(ec);
  EXPECT_FALSE(ec);
  EXPECT_TRUE(parser.is_done());
  EXPECT_EQ(r.body, "{}");
}

TEST(UpstreamResponseParserTest, MalformedHeadsAreBeastsErrors) {
  for (std::string_view wire :
       {"HTTP/1.1 2000 OK\r\n\r\n", "HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"}) {
    upstream_response_parser parser;
    const auto r = parse(parser, wire);
    EXPECT_TRUE(r.ec) << wire;
    EXPECT_EQ(r.ec.category(), http::make_error_code(http::error::bad_version).category()) << wire;
  }
}

TEST(UpstreamResponseParserTest, TheHeaderLimitHolds) {
  upstream_response_parser parser;
  parser.header_limit(64);
  const auto r = parse(parser, "HTTP/1.1 200 OK\r\nX-Long: " + std::string(100, 'a') + "\r\n\r\n");
  EXPECT_EQ(r.ec, http::error::header_limit);
}

}  // namespace
}  // namespace tether::net
