// The caller's request parser: the head as tether hands it on, the counts the framing checks use,
// keep-alive from every Connection field, and the body as a string.
#include "net/downstream_request_parser.hpp"

#include <gtest/gtest.h>

#include <boost/asio/buffer.hpp>
#include <string>
#include <string_view>

namespace tether::net {
namespace {

namespace http = boost::beast::http;

// Parses `wire` whole (head, then body); the error if it stops short.
boost::beast::error_code parse(downstream_request_parser& parser, std::string_view wire) {
  boost::beast::error_code ec;
  parser.eager(true);
  std::size_t used = 0;
  while (!parser.is_done() && used < wire.size()) {
    const auto n = parser.put(boost::asio::buffer(wire.data() + used, wire.size() - used), ec);
    used += n;
    if (ec || n == 0) break;
  }
  return ec;
}

TEST(DownstreamRequestParserTest, KeepsTheHeadInWireOrderWithLowerCaseNames) {
  downstream_request_parser parser;
  const std::string body = R"({"model":"m","messages":[]})";
  const auto ec = parse(parser,
                        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
                        "X-Tag: a\r\nAuthorization: Bearer k\r\nx-tag: b\r\n"
                        "Content-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body);
  ASSERT_FALSE(ec) << ec.message();
  ASSERT_TRUE(parser.is_done());
  EXPECT_EQ(parser.method(), http::verb::post);
  EXPECT_EQ(parser.method_string(), "POST");
  EXPECT_EQ(parser.target(), "/v1/chat/completions");
  EXPECT_EQ(parser.version(), 11);
  ASSERT_EQ(parser.headers().size(), 5u);
  EXPECT_EQ(parser.headers()[1].name, "x-tag");
  EXPECT_EQ(parser.headers()[2].name, "authorization");
  EXPECT_EQ(parser.headers()[3].value, "b");  // after authorization, as sent
  EXPECT_EQ(parser.content_lengths(), 1u);
  EXPECT_EQ(parser.transfer_encodings(), 0u);
  EXPECT_FALSE(parser.expects_continue());
  EXPECT_TRUE(parser.keep_alive());
  EXPECT_EQ(parser.body(), body);
}

// Beast accepts both of these heads; on_read_header refuses them from the counts.
TEST(DownstreamRequestParserTest, CountsWhatTheFramingChecksRefuse) {
  const auto head_of = [](downstream_request_parser& parser, const std::string& head) {
    parser.eager(false);
    boost::beast::error_code ec;
    parser.put(boost::asio::buffer(head), ec);
    EXPECT_FALSE(ec) << ec.message();
    return parser.is_header_done();
  };
  downstream_request_parser lengths;
  ASSERT_TRUE(head_of(lengths,
                      "POST /v1/embeddings HTTP/1.1\r\nContent-Length: 3\r\ncontent-length: 3\r\n"
                      "Expect: 100-Continue\r\nExpect: nothing\r\n\r\n"));
  EXPECT_EQ(lengths.content_lengths(), 2u);
  EXPECT_EQ(lengths.transfer_encodings(), 0u);
  EXPECT_TRUE(lengths.expects_continue());  // the first Expect field decides
  downstream_request_parser encodings;
  ASSERT_TRUE(
      head_of(encodings,
              "POST /v1/embeddings HTTP/1.1\r\nTransfer-Encoding: gzip\r\n"
              "Transfer-Encoding: chunked\r\nExpect: nothing\r\nExpect: 100-continue\r\n\r\n"));
  EXPECT_EQ(encodings.content_lengths(), 0u);
  EXPECT_EQ(encodings.transfer_encodings(), 2u);
  EXPECT_TRUE(encodings.chunked());
  EXPECT_FALSE(encodings.expects_continue());
}

TEST(DownstreamRequestParserTest, AConnectionCloseInAnyConnectionFieldEndsKeepAlive) {
  downstream_request_parser parser;
  const auto ec =
      parse(parser, "GET /v1/models HTTP/1.1\r\nConnection: x-other\r\nConnection: close\r\n\r\n");
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_FALSE(parser.keep_alive());
}

TEST(DownstreamRequestParserTest, AChunkedBodyIsJoined) {
  downstream_request_parser parser;
  const auto ec = parse(parser,
                        "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                        "3\r\n{\"a\r\n4;x=1\r\n\":1}\r\n0\r\n\r\n");
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_TRUE(parser.chunked());
  EXPECT_EQ(parser.body(), "{\"a\":1}");
}

TEST(DownstreamRequestParserTest, TheBodyLimitHolds) {
  downstream_request_parser parser;
  parser.body_limit(4);
  const auto ec = parse(parser, "POST /v1/completions HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_EQ(ec, http::error::body_limit);
}

TEST(DownstreamRequestParserTest, AnHttp10RequestIsNotKeptAliveUnlessItAsks) {
  downstream_request_parser plain;
  ASSERT_FALSE(parse(plain, "GET / HTTP/1.0\r\n\r\n"));
  EXPECT_EQ(plain.version(), 10);
  EXPECT_FALSE(plain.keep_alive());
  downstream_request_parser asking;
  ASSERT_FALSE(parse(asking, "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
  EXPECT_TRUE(asking.keep_alive());
}

}  // namespace
}  // namespace tether::net
