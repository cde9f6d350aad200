#include "net/upstream_wire.hpp"

#include <gtest/gtest.h>

#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <optional>
#include <string>

namespace tether::net {
namespace {

namespace http = boost::beast::http;
using parsed = http::request<http::string_body>;

// Parses the bytes as the upstream would: one whole request, nothing left over.
parsed parse(const std::string& wire) {
  http::request_parser<http::string_body> parser;
  parser.eager(true);
  boost::system::error_code ec;
  auto used = parser.put(boost::asio::buffer(wire), ec);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_TRUE(parser.is_done());
  EXPECT_EQ(used, wire.size());
  return parser.release();
}

// What the session sends: the head, then the request's body from its own buffer.
std::string wire_of(const upstream_request& r, std::string_view host) {
  return upstream_head(r, host) + std::string(r.body.view());
}

upstream_request chat(std::string body) {
  upstream_request r;
  r.method = "POST";
  r.target = "/v1/chat/completions";
  r.headers = {{"authorization", "Bearer sk-test"},
               {"content-type", "application/json"},
               {"x-request-id", "req-1"}};
  r.body = std::move(body);
  return r;
}

TEST(UpstreamWireTest, AnUpstreamParsesTheSameRequest) {
  const std::string body = R"({"model":"m","messages":[{"role":"user","content":"hi"}]})";
  auto req = parse(wire_of(chat(body), "127.0.0.1:8000"));
  EXPECT_EQ(req.method(), http::verb::post);
  EXPECT_EQ(req.target(), "/v1/chat/completions");
  EXPECT_EQ(req.version(), 11);
  EXPECT_EQ(req[http::field::authorization], "Bearer sk-test");
  EXPECT_EQ(req[http::field::content_type], "application/json");
  EXPECT_EQ(req["x-request-id"], "req-1");
  EXPECT_EQ(req[http::field::host], "127.0.0.1:8000");
  EXPECT_TRUE(req.keep_alive());
  EXPECT_EQ(req[http::field::content_length], std::to_string(body.size()));
  EXPECT_EQ(req.body(), body);
}

TEST(UpstreamWireTest, TheCallersFramingAndHopByHopHeadersAreNotSent) {
  auto r = chat("{}");
  r.headers.push_back({"Host", "evil.example"});
  r.headers.push_back({"Content-Length", "999"});
  r.headers.push_back({"transfer-encoding", "chunked"});
  r.headers.push_back({"Connection", "close"});
  r.headers.push_back({"keep-alive", "timeout=1"});
  r.headers.push_back({"TE", "trailers"});
  r.headers.push_back({"trailer", "x"});
  r.headers.push_back({"upgrade", "h2c"});
  r.headers.push_back({"proxy-connection", "keep-alive"});
  auto wire = wire_of(r, "up.example");
  auto req = parse(wire);
  EXPECT_EQ(req[http::field::host], "up.example");
  EXPECT_EQ(req[http::field::content_length], "2");
  EXPECT_EQ(req.count(http::field::transfer_encoding), 0u);
  EXPECT_EQ(req.count(http::field::host), 1u);
  EXPECT_EQ(req.count(http::field::content_length), 1u);
  EXPECT_EQ(req.count(http::field::connection), 1u);
  EXPECT_TRUE(req.keep_alive());
  for (const char* gone : {"keep-alive", "te", "trailer", "upgrade", "proxy-connection"})
    EXPECT_EQ(req.count(gone), 0u) << gone;
  EXPECT_EQ(req.body(), "{}");
}

TEST(UpstreamWireTest, AHeaderThatCouldEndItsLineIsDropped) {
  auto r = chat("{}");
  r.headers.push_back({"x-evil", "a\r\nx-injected: 1"});
  r.headers.push_back({"x-evil-lf", "a\nx-injected: 2"});
  r.headers.push_back({std::string("x-nul\0", 6), "v"});
  r.headers.push_back({"x-fine", "kept"});
  auto wire = wire_of(r, "up");
  EXPECT_EQ(wire.find("x-injected"), std::string::npos);
  EXPECT_EQ(wire.find("x-evil"), std::string::npos);
  EXPECT_EQ(wire.find('\0'), std::string::npos);
  EXPECT_EQ(parse(wire)["x-fine"], "kept");
}

TEST(UpstreamWireTest, ContentLengthFollowsTheMethodWhenTheBodyIsEmpty) {
  upstream_request get;
  get.method = "GET";
  get.target = "/v1/models";
  auto g = parse(wire_of(get, "up"));
  EXPECT_EQ(g.method(), http::verb::get);
  EXPECT_EQ(g.count(http::field::content_length), 0u);
  EXPECT_EQ(g.count(http::field::transfer_encoding), 0u);

  for (const char* method : {"POST", "PUT", "OPTIONS"}) {
    upstream_request empty;
    empty.method = method;
    empty.target = "/v1/x";
    auto p = parse(wire_of(empty, "up"));
    EXPECT_EQ(p[http::field::content_length], "0") << method;
  }

  upstream_request del;
  del.method = "DELETE";
  del.target = "/v1/files/1";
  del.body = "x";
  EXPECT_EQ(parse(wire_of(del, "up"))[http::field::content_length], "1");
}

TEST(UpstreamWireTest, AMethodBeastDoesNotKnowIsSentAsGiven) {
  upstream_request r;
  r.method = "PURGE";
  r.target = "/cache";
  auto wire = wire_of(r, "up");
  EXPECT_EQ(wire.rfind("PURGE /cache HTTP/1.1\r\n", 0), 0u);
  EXPECT_EQ(parse(wire).method_string(), "PURGE");
}

TEST(UpstreamWireTest, TheHeadEndsAtItsEmptyLineAndCarriesNoBody) {
  const std::string body = R"({"model":"m"})";
  const auto head = upstream_head(chat(body), "up");
  ASSERT_GE(head.size(), 4u);
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n");
  EXPECT_EQ(head.find("\r\n\r\n"), head.size() - 4);
  EXPECT_EQ(head.find(body), std::string::npos);
}

TEST(UpstreamWireTest, ALargeBodyIsSentWhole) {
  std::string body(1 << 20, 'x');
  auto req = parse(wire_of(chat(body), "up"));
  EXPECT_EQ(req[http::field::content_length], std::to_string(body.size()));
  EXPECT_EQ(req.body().size(), body.size());
}

}  // namespace
}  // namespace tether::net
