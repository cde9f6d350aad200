// scan_head alone, and the two parsers given a scanned head: what they keep must be what Beast's
// own parse of the whole head keeps, and whatever is out of the ordinary must be left to Beast.
#include "net/head_scan.hpp"

#include <gtest/gtest.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <cstring>
#include <memory>
#include <string>

#include "net/buffered_parse.hpp"
#include "net/downstream_request_parser.hpp"
#include "net/upstream_response_parser.hpp"

namespace tether::net {
namespace {

// A response's head starts with its version, a request's with its method.
head_scan scan(std::string_view bytes, scanned_head& out, std::size_t limit = 8192) {
  return scan_head(bytes, limit, !bytes.starts_with("HTTP/"), out);
}

head_scan scan(std::string_view bytes, std::size_t limit = 8192) {
  scanned_head out;
  return scan(bytes, out, limit);
}

TEST(HeadScanTest, AWholeHeadIsReadWithLowerCaseNamesTrimmedValuesAndItsFramingForBeast) {
  const std::string head =
      "POST /v1/chat/completions HTTP/1.1\r\n"
      "Host: gw\r\n"
      "X-Stainless-Runtime-Version:   v20.19.2 \t\r\n"
      "Content-Length: 12\r\n"
      "empty:\r\n"
      "Connection:keep-alive\r\n"
      "\r\n";
  scanned_head out;
  ASSERT_EQ(scan(head + "{\"model\":1}", out), head_scan::scanned);
  EXPECT_EQ(out.size, head.size());
  ASSERT_EQ(out.fields.size(), 5U);
  EXPECT_EQ(out.fields[0].name, "host");
  EXPECT_EQ(out.fields[0].value, "gw");
  EXPECT_EQ(out.fields[1].name, "x-stainless-runtime-version");
  EXPECT_EQ(out.fields[1].value, "v20.19.2");
  EXPECT_EQ(out.fields[2].name, "content-length");
  EXPECT_EQ(out.fields[3].name, "empty");
  EXPECT_EQ(out.fields[3].value, "");
  EXPECT_EQ(out.fields[4].value, "keep-alive");
  // Beast sees the start line and the fields it acts on, verbatim.
  EXPECT_EQ(out.for_beast,
            "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 12\r\n"
            "Connection:keep-alive\r\n\r\n");
}

TEST(HeadScanTest, AValueMayHoldTabsAndObsTextPastSixteenBytes) {
  scanned_head out;
  ASSERT_EQ(scan("HTTP/1.1 200 OK\r\nx-long: 0123456789abcdef\tghij\xc3\xa9z\r\n\r\n", out),
            head_scan::scanned);
  EXPECT_EQ(out.fields.at(0).value, "0123456789abcdef\tghij\xc3\xa9z");
}

TEST(HeadScanTest, AHeadNotYetEndedNeedsMoreUntilTheLimit) {
  EXPECT_EQ(scan("GET / HTTP/1.1\r\nHost: gw\r\n"), head_scan::need_more);
  EXPECT_EQ(scan("GET / HTTP/1.1\r\nHost: gw\r\n\r"), head_scan::need_more);
  EXPECT_EQ(scan("GET / HTTP/1.1\r\nHo"), head_scan::need_more);
  EXPECT_EQ(scan("GET / HTTP/1.1\r"), head_scan::need_more);
  // At the limit with no end: too long, which Beast reports.
  EXPECT_EQ(scan("GET / HTTP/1.1\r\nHost: gw\r\n", 26), head_scan::unusual);
}

TEST(HeadScanTest, AHeadExactlyAtTheLimitIsReadAndOneByteMoreIsBeasts) {
  const std::string head = "GET / HTTP/1.1\r\nHost: gw\r\n\r\n";
  EXPECT_EQ(scan(head, head.size()), head_scan::scanned);
  EXPECT_EQ(scan(head, head.size() - 1), head_scan::unusual);
}

TEST(HeadScanTest, AnythingOutOfTheOrdinaryIsLeftToBeast) {
  for (const std::string& bad : {
           std::string{"\r\nGET / HTTP/1.1\r\nHost: gw\r\n\r\n"},         // a stray CRLF first
           std::string{"GET / HTTP/1.1\r\nHost : gw\r\n\r\n"},            // space before colon
           std::string{"GET / HTTP/1.1\r\n: gw\r\n\r\n"},                 // empty name
           std::string{"GET / HTTP/1.1\r\nHost gw\r\n\r\n"},              // no colon
           std::string{"GET / HTTP/1.1\r\nHo(st: gw\r\n\r\n"},            // not a tchar
           std::string{"GET / HTTP/1.1\r\nHost: gw\r\n folded\r\n\r\n"},  // obs-fold
           std::string{"GET / HTTP/1.1\r\nHost: g\nw\r\n\r\n"},           // bare LF
           std::string{"GET / HTTP/1.1\r\nHost: g\rw\r\n\r\n"},           // bare CR
           std::string{"GET / HTTP/1.1\r\nHost: g\x7fw\r\n\r\n"},         // DEL
           std::string("GET / HTTP/1.1\r\nHost: g\0w\r\n\r\n", 29),       // NUL
           std::string{"GET / HTTP/1.1\r\nx: 0123456789abcdefghij\x01k\r\n\r\n"},  // past 16
           std::string{"GET / HTTP/1.1\nHost: gw\r\n\r\n"},      // LF-only start line
           std::string{"GET / HTTP/1.1\r\nHost: gw\r\n\r\x01"},  // CR, no LF, at end
       }) {
    EXPECT_EQ(scan(bad), head_scan::unusual) << bad;
  }
}

// Beast reads a version's eight bytes, and a status's digits and SP, before it judges them: given
// a start line of another shape and only the head after it, it could wait for more where the
// whole message had it reject the line.
TEST(HeadScanTest, AStartLineOfAnotherShapeIsLeftToBeast) {
  EXPECT_EQ(scan("A / HTTP/1.1\r\nHost: gw\r\n\r\n"), head_scan::scanned);
  EXPECT_EQ(scan("HTTP/1.1 200 \r\nServer: x\r\n\r\n"), head_scan::scanned);
  for (const char* line : {"POST //cength: 16", "GET / HTTP/1", "GET / HTTP/1.1 ", "GET / http/1.1",
                           "GET /HTTP/1.1"}) {
    EXPECT_EQ(
        scan_head(std::string{line} + "\r\n\r\n{}", 8192, true, *std::make_unique<scanned_head>()),
        head_scan::unusual)
        << line;
  }
  for (const char* line : {" m", "HTTP/1.1 200", "HTTP/1.1 20 OK", "HTTP/1.1  200 OK",
                           "HTTP/11 200 OK", "ICY 200 OK"}) {
    EXPECT_EQ(scan_head(std::string{line} + "\r\n\r\nuntil the end", 8192, false,
                        *std::make_unique<scanned_head>()),
              head_scan::unusual)
        << line;
  }
}

TEST(HeadScanTest, OnlyTheFieldsBeastActsOnFrameTheMessage) {
  for (const char* name :
       {"connection", "proxy-connection", "content-length", "transfer-encoding", "upgrade"}) {
    EXPECT_TRUE(frames_message(name)) << name;
  }
  for (const char* name : {"expect", "content-type", "host", "te", "trailer", "keep-alive"}) {
    EXPECT_FALSE(frames_message(name)) << name;
  }
}

// The request parser, given a scanned head, keeps what Beast's whole parse would: the fields,
// the framing counts, Expect, keep-alive, and the body after the head.
TEST(HeadScanTest, TheRequestParserGivenAScannedHeadKeepsWhatBeastsParseWould) {
  const std::string head =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nUser-Agent: OpenAI/JS 4.104.0\r\n"
      "Expect: 100-continue\r\nContent-Length: 2\r\nConnection: close\r\n"
      "Authorization: Bearer sk-0123456789abcdef0123456789\r\n\r\n";
  boost::beast::flat_buffer buffer;
  const auto put_bytes = [&](const std::string& bytes) {
    auto space = buffer.prepare(bytes.size());
    std::memcpy(space.data(), bytes.data(), bytes.size());
    buffer.commit(bytes.size());
  };
  put_bytes(head + "{}");
  downstream_request_parser parser;
  parser.limit_head(8192);
  boost::beast::error_code ec;
  EXPECT_EQ(put_head_buffered(parser, buffer, ec), head.size());
  ASSERT_FALSE(ec) << ec.message();
  ASSERT_TRUE(parser.is_header_done());
  EXPECT_EQ(parser.method_string(), "POST");
  EXPECT_EQ(parser.target(), "/v1/chat/completions");
  EXPECT_EQ(parser.version(), 11);
  EXPECT_FALSE(parser.keep_alive());
  EXPECT_TRUE(parser.expects_continue());
  EXPECT_EQ(parser.content_lengths(), 1U);
  EXPECT_EQ(parser.transfer_encodings(), 0U);
  ASSERT_EQ(parser.headers().size(), 6U);
  EXPECT_EQ(parser.headers()[1].name, "user-agent");
  EXPECT_EQ(parser.headers()[3].name, "content-length");  // once, though Beast saw it too
  EXPECT_EQ(parser.headers()[5].value, "Bearer sk-0123456789abcdef0123456789");
  parser.eager(true);
  put_buffered(parser, buffer, ec);
  EXPECT_FALSE(ec);
  EXPECT_TRUE(parser.is_done());
  EXPECT_EQ(parser.body(), "{}");
}

// Beast still judges the framing: a malformed Content-Length is its error, as in a whole parse.
TEST(HeadScanTest, AMalformedContentLengthInAScannedHeadIsBeastsError) {
  boost::beast::flat_buffer buffer;
  const std::string bytes = "POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 1x\r\n\r\n";
  auto space = buffer.prepare(bytes.size());
  std::memcpy(space.data(), bytes.data(), bytes.size());
  buffer.commit(bytes.size());
  downstream_request_parser parser;
  parser.limit_head(8192);
  boost::beast::error_code ec;
  put_head_buffered(parser, buffer, ec);
  EXPECT_EQ(ec, boost::beast::http::error::bad_content_length);
}

TEST(HeadScanTest, TheResponseParserGivenAScannedHeadReadsAChunkedBodyAfterIt) {
  const std::string head =
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
      "x-ratelimit-remaining-requests: 9999\r\nopenai-processing-ms: 12\r\n\r\n";
  boost::beast::flat_buffer buffer;
  const std::string bytes = head + "5\r\nhello\r\n0\r\n\r\n";
  auto space = buffer.prepare(bytes.size());
  std::memcpy(space.data(), bytes.data(), bytes.size());
  buffer.commit(bytes.size());
  upstream_response_parser parser;
  parser.limit_head(64 * 1024);
  boost::beast::error_code ec;
  EXPECT_EQ(put_head_buffered(parser, buffer, ec), head.size());
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(parser.status(), 200);
  EXPECT_TRUE(parser.chunked());
  ASSERT_EQ(parser.headers().size(), 4U);
  EXPECT_EQ(parser.headers()[2].name, "x-ratelimit-remaining-requests");
  char body[64];
  parser.body() = {body, sizeof(body)};
  put_buffered(parser, buffer, ec);
  EXPECT_FALSE(ec);
  EXPECT_TRUE(parser.is_done());
  EXPECT_EQ(std::string(body, sizeof(body) - parser.body().size), "hello");
}

}  // namespace
}  // namespace tether::net
