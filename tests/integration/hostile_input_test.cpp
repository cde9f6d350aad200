// Hostile callers (issue #8): malformed or tricky requests each get the taxonomy's 4xx with a
// clear message, or a closed connection where HTTP requires it, and the gateway then serves the
// next request. Also the server limits: header count and size, body size, the header-and-body
// timeout (slowloris), the keep-alive idle timeout and the connection cap.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

const std::string chat_path = "/v1/chat/completions";

// A response read off a raw connection (ours always carry Content-Length when not streaming).
struct raw_response {
  int status = 0;
  std::string head;  // status line and headers, names lower-cased
  std::string body;

  std::string code() const {
    boost::system::error_code ec;
    auto v = boost::json::parse(body, ec);
    if (ec || !v.is_object()) return "<not json>";
    return str(v.at("error").at("code"));
  }
  std::string header(const std::string& name) const {
    auto at = head.find("\r\n" + name + ": ");
    if (at == std::string::npos) return {};
    at += name.size() + 4;
    return head.substr(at, head.find("\r\n", at) - at);
  }
};

// Every whole response in `bytes`, in order.
std::vector<raw_response> parse_responses(std::string_view bytes) {
  std::vector<raw_response> out;
  while (true) {
    auto end = bytes.find("\r\n\r\n");
    if (end == std::string_view::npos || bytes.substr(0, 9).find("HTTP/1.") != 0) break;
    raw_response r;
    r.head = std::string(bytes.substr(0, end + 2));
    std::transform(r.head.begin(), r.head.end(), r.head.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    r.status = std::stoi(r.head.substr(9, 3));
    auto length = r.header("content-length");
    const std::size_t n = length.empty() ? 0 : std::stoul(length);
    if (bytes.size() < end + 4 + n) break;
    r.body = std::string(bytes.substr(end + 4, n));
    out.push_back(std::move(r));
    bytes.remove_prefix(end + 4 + n);
  }
  return out;
}

std::string raw_post(const std::string& body, const std::string& extra_headers = "") {
  return "POST " + chat_path + " HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n" +
         extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string nested(std::size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

class HostileInputTest : public ::testing::Test {
 protected:
  void start(const std::string& server_keys = "") {
    gw_ = std::make_unique<gateway_process>(gateway_config(
        mock_, "deadline_ms = 10000\nattempt_timeout_ms = 5000",
        model_entry("chat", "mock") + model_entry("other", "mock"), "", server_keys));
  }

  http_response post(std::string_view body, const header_map& headers = {}) {
    return request("POST", gw_->port(), chat_path, body, headers);
  }

  // The refusal is the taxonomy's, says something, and never quotes the body.
  void expect_refused(const http_response& r, int status, const std::string& code,
                      const std::string& context) {
    ASSERT_EQ(r.status, status) << context << ": " << r.body;
    auto error = r.json().at("error");
    EXPECT_EQ(str(error.at("code")), code) << context;
    EXPECT_FALSE(str(error.at("message")).empty()) << context;
    EXPECT_EQ(r.body.find("SECRET"), std::string::npos) << context;
  }

  // Whatever came before, a normal request on a new connection is served.
  void expect_still_serves() {
    auto r = post(chat_body("chat"));
    EXPECT_EQ(r.status, 200) << r.body;
  }

  // Sends raw bytes; expects one refusal with `status` and `code`, then the connection closed.
  void expect_refused_and_closed(const std::string& bytes, int status, const std::string& code,
                                 const std::string& context) {
    raw_connection conn{gw_->port()};
    conn.send(bytes);
    auto got = conn.read_until_closed(5s);
    EXPECT_TRUE(conn.peer_closed()) << context << ": the connection stayed open";
    auto responses = parse_responses(got);
    ASSERT_EQ(responses.size(), 1u) << context << ": " << got;
    EXPECT_EQ(responses[0].status, status) << context;
    EXPECT_EQ(responses[0].code(), code) << context;
    EXPECT_EQ(responses[0].header("connection"), "close") << context;
  }

  mock_server mock_;
  std::unique_ptr<gateway_process> gw_;
};

// ---- JSON -------------------------------------------------------------------------------------

TEST_F(HostileInputTest, MalformedJsonIs400BadRequest) {
  start();
  for (const auto& body : std::vector<std::string>{
           R"({"model":"chat","messages":[SECRET)", R"({"model":"chat",})", R"({model:"chat"})",
           R"({"model":"chat"} trailing)", std::string("{\"model\":\"chat\"\0}", 17), ""}) {
    expect_refused(post(body), 400, "bad_request", "body '" + body + "'");
  }
  EXPECT_EQ(mock_.stats().at("requests").as_int64(), 0);
  expect_still_serves();
}

TEST_F(HostileInputTest, JsonThatIsNotAnObjectIs400SayingAnObjectIsRequired) {
  start();
  for (const char* body : {"[]", R"(["chat"])", R"("chat")", "42", "null", "true"}) {
    auto r = post(body);
    expect_refused(r, 400, "bad_request", body);
    EXPECT_NE(str(r.json().at("error").at("message")).find("object"), std::string::npos) << body;
  }
  EXPECT_EQ(mock_.stats().at("requests").as_int64(), 0);
  expect_still_serves();
}

TEST_F(HostileInputTest, MissingModelIs400NamingTheField) {
  start();
  auto r = post(R"({"messages":[{"role":"user","content":"SECRET"}]})");
  expect_refused(r, 400, "bad_request", "no model");
  EXPECT_NE(str(r.json().at("error").at("message")).find("model"), std::string::npos);
  expect_still_serves();
}

TEST_F(HostileInputTest, ModelThatIsNotAStringIs400) {
  start();
  for (const char* model : {"42", "null", "true", R"(["chat"])", R"({"name":"chat"})"}) {
    auto r = post(std::string(R"({"model":)") + model + R"(,"messages":[]})");
    expect_refused(r, 400, "bad_request", model);
    EXPECT_NE(str(r.json().at("error").at("message")).find("string"), std::string::npos);
  }
  EXPECT_EQ(mock_.stats().at("requests").as_int64(), 0);
  expect_still_serves();
}

TEST_F(HostileInputTest, HugeModelNameIs404UnknownModelAndIsNeverEchoedOrMadeALabel) {
  start();
  const std::string model = "SECRET" + std::string(1024 * 1024, 'm');
  auto r = post(chat_body(model));
  expect_refused(r, 404, "unknown_model", "1 MiB model name");
  EXPECT_LT(r.body.size(), 1024u);
  auto metrics = request("GET", gw_->port(), "/metrics");
  EXPECT_EQ(metrics.body.find("mmmmmmmm"), std::string::npos);
  EXPECT_NE(metrics.body.find(R"(tether_requests_total{model="",outcome="unknown_model"} 1)"),
            std::string::npos)
      << metrics.body;
  expect_still_serves();
}

TEST_F(HostileInputTest, InvalidUtf8AnywhereInTheBodyIs400) {
  start();
  const std::string prefix = R"({"model":"chat","messages":[{"role":"user","content":")";
  // Not UTF-8, an overlong '/', a lone surrogate, a sequence cut short.
  for (const char* bad : {"\xff\xfe", "\xc0\xaf", "\xed\xa0\x80", "ok\xe2\x82"}) {
    expect_refused(post(prefix + bad + R"("}]})"), 400, "bad_request", prefix + bad);
  }
  expect_refused(post("{\"model\":\"ch\xff"
                      "at\"}"),
                 400, "bad_request", "in the model");
  expect_refused(post("{\"mod\xff"
                      "el\":\"chat\"}"),
                 400, "bad_request", "in a key");
  EXPECT_EQ(mock_.stats().at("requests").as_int64(), 0);
  expect_still_serves();
}

TEST_F(HostileInputTest, NestingDeeperThanTheLimitIs400AndVeryDeepNestingDoesNotCrash) {
  start("max_json_depth = 16");
  auto deep = post(R"({"model":"chat","x":)" + nested(16) + "}");
  expect_refused(deep, 400, "bad_request", "depth 17");
  EXPECT_NE(str(deep.json().at("error").at("message")).find("deeper"), std::string::npos);
  // A million levels in 2 MB: must be refused, not recursed into.
  expect_refused(post(R"({"model":"chat","x":)" + nested(1'000'000) + "}"), 400, "bad_request",
                 "depth 1e6");
  expect_refused(post(std::string(1'000'000, '{')), 400, "bad_request", "1e6 open braces");
  // Within the limit it is routed.
  EXPECT_EQ(post(R"({"model":"chat","messages":[],"x":)" + nested(10) + "}").status, 200);
  EXPECT_EQ(mock_.stats().at("requests").as_int64(), 1);
}

TEST_F(HostileInputTest, DuplicateModelKeyIs400EvenWhenOneIsEscaped) {
  start();
  for (const char* body :
       {R"({"model":"chat","model":"other"})", R"({"model":"chat","messages":[],"model":"chat"})",
        R"({"model":"chat","mod\u0065l":"other"})"}) {
    auto r = post(body);
    expect_refused(r, 400, "bad_request", body);
    EXPECT_NE(str(r.json().at("error").at("message")).find("model"), std::string::npos);
  }
  EXPECT_EQ(mock_.stats().at("requests").as_int64(), 0);
  // A nested "model" key is the body's business, not a duplicate.
  auto nested_model = post(R"({"model":"chat","messages":[],"meta":{"model":"x"}})");
  EXPECT_EQ(nested_model.status, 200) << nested_model.body;
  auto seen = mock_log(mock_.stats());
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(str(seen[0].at("model")), "mock");
}

// ---- HTTP framing -----------------------------------------------------------------------------

TEST_F(HostileInputTest, ChunkedRequestBodyIsReassembledAndRouted) {
  start();
  const std::string body = chat_body("chat");
  std::string chunked;
  for (std::size_t at = 0; at < body.size(); at += 7) {
    auto piece = body.substr(at, 7);
    char size[16];
    std::snprintf(size, sizeof size, "%zx", piece.size());
    chunked += std::string(size) + "\r\n" + piece + "\r\n";
  }
  chunked += "0\r\n\r\n";
  raw_connection conn{gw_->port()};
  conn.send("POST " + chat_path +
            " HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
            chunked);
  auto responses = parse_responses(conn.read_until_closed(5s));
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_EQ(responses[0].status, 200) << responses[0].body;
  auto seen = mock_log(mock_.stats());
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(str(seen[0].at("model")), "mock");
  expect_still_serves();
}

TEST_F(HostileInputTest, InvalidChunkedBodyIs400AndTheConnectionIsClosed) {
  start();
  expect_refused_and_closed("POST " + chat_path +
                                " HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                                "zz\r\n{\"model\":\"chat\"}\r\n0\r\n\r\n",
                            400, "bad_request", "bad chunk size");
  expect_still_serves();
}

TEST_F(HostileInputTest, ChunkedBodyOverTheLimitIs413) {
  start("max_request_bytes = 1024");
  std::string chunked;
  for (int i = 0; i < 8; ++i) chunked += "200\r\n" + std::string(0x200, ' ') + "\r\n";
  expect_refused_and_closed("POST " + chat_path +
                                " HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" +
                                chunked + "0\r\n\r\n",
                            413, "payload_too_large", "chunked 4 KiB");
  expect_still_serves();
}

// Request smuggling: a front proxy and tether must never disagree on where a request ends, so
// any ambiguous framing is refused and the connection closed; what follows is never served.
TEST_F(HostileInputTest, ContentLengthWithTransferEncodingIsRefusedAndNothingIsSmuggled) {
  start();
  const std::string smuggled = "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Request-Id: smuggled\r\n\r\n";
  expect_refused_and_closed("POST " + chat_path +
                                " HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
                                "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" +
                                smuggled,
                            400, "bad_request", "CL + TE");
  expect_refused_and_closed("POST " + chat_path +
                                " HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
                                "Content-Length: 5\r\n\r\n0\r\n\r\n" +
                                smuggled,
                            400, "bad_request", "TE + CL");
  expect_refused_and_closed("POST " + chat_path +
                                " HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n"
                                "Content-Length: 40\r\n\r\n{}" +
                                smuggled,
                            400, "bad_request", "conflicting Content-Length");
  expect_refused_and_closed("POST " + chat_path +
                                " HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n"
                                "Content-Length: 2\r\n\r\n{}" +
                                smuggled,
                            400, "bad_request", "repeated Content-Length");
  expect_refused_and_closed("POST " + chat_path +
                                " HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, gzip\r\n"
                                "\r\n0\r\n\r\n" +
                                smuggled,
                            400, "bad_request", "chunked not last");
  EXPECT_EQ(mock_.stats().at("requests").as_int64(), 0);
  auto metrics = request("GET", gw_->port(), "/metrics");
  EXPECT_NE(metrics.body.find(R"(tether_requests_total{model="",outcome="bad_request"} 5)"),
            std::string::npos)
      << metrics.body;
  expect_still_serves();
}

TEST_F(HostileInputTest, PipelinedRequestsAreAnsweredInOrderOnTheOneConnection) {
  start();
  const auto body = chat_body("chat");
  raw_connection conn{gw_->port()};
  conn.send(raw_post(body, "X-Request-Id: p1\r\n") +
            "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Request-Id: p2\r\n\r\n" +
            raw_post(R"({"model":"nope"})", "X-Request-Id: p3\r\n") +
            raw_post(body, "X-Request-Id: p4\r\nConnection: close\r\n"));
  auto responses = parse_responses(conn.read_until_closed(10s));
  ASSERT_EQ(responses.size(), 4u);
  EXPECT_EQ(responses[0].status, 200);
  EXPECT_EQ(responses[0].header("x-request-id"), "p1");
  EXPECT_EQ(responses[1].status, 200);
  EXPECT_EQ(responses[1].body, "ok\n");
  EXPECT_EQ(responses[2].status, 404);
  EXPECT_EQ(responses[2].code(), "unknown_model");
  EXPECT_EQ(responses[2].header("x-request-id"), "p3");
  EXPECT_EQ(responses[3].status, 200);
  EXPECT_EQ(responses[3].header("x-request-id"), "p4");
  EXPECT_TRUE(conn.peer_closed());
  EXPECT_EQ(mock_.stats().at("requests").as_int64(), 2);
  expect_still_serves();
}

TEST_F(HostileInputTest, BadHeaderValuesAre400) {
  start();
  // Well-formed HTTP with a value the gateway cannot use: 400, the connection stays usable.
  http_connection conn{gw_->port()};
  for (const char* value : {"soon", "-1", "1e3", "0x10"}) {
    auto r = conn.request("POST", chat_path, chat_body("chat"), {{"x-request-deadline-ms", value}});
    expect_refused(r, 400, "bad_request", value);
  }
  EXPECT_EQ(conn.request("POST", chat_path, chat_body("chat")).status, 200);
  // Bytes HTTP forbids in a header: refused, and the connection closed.
  expect_refused_and_closed(raw_post(chat_body("chat"), std::string("X-Junk: a\x01z\r\n")), 400,
                            "bad_request", "control byte in a value");
  expect_refused_and_closed(raw_post(chat_body("chat"), std::string("X-Junk: a\0z\r\n", 13)), 400,
                            "bad_request", "NUL in a value");
  expect_refused_and_closed(raw_post(chat_body("chat"), "Bad Name: x\r\n"), 400, "bad_request",
                            "space in a name");
  expect_refused_and_closed(
      "POST " + chat_path + " HTTP/1.1\r\nHost: t\r\nContent-Length: 1x\r\n\r\n", 400,
      "bad_request", "Content-Length not a number");
  expect_still_serves();
}

// ---- limits -----------------------------------------------------------------------------------

TEST_F(HostileInputTest, TooManyHeaderFieldsIs431) {
  start("max_header_fields = 20");
  header_map many;
  for (int i = 0; i < 30; ++i) many.emplace_back("x-filler-" + std::to_string(i), "v");
  expect_refused(post(chat_body("chat"), many), 431, "headers_too_large", "30 fields");
  expect_still_serves();
}

TEST_F(HostileInputTest, HeaderBytesOverTheLimitAre431) {
  start("max_header_bytes = 2048");
  expect_refused(post(chat_body("chat"), {{"x-big", std::string(4096, 'h')}}), 431,
                 "headers_too_large", "4 KiB header");
  expect_still_serves();
}

TEST_F(HostileInputTest, SlowlorisHeadersGet408AtTheHeaderTimeoutWhileBytesStillTrickle) {
  start("header_timeout_ms = 600");
  raw_connection conn{gw_->port()};
  const auto t0 = test_clock::now();
  conn.send("POST " + chat_path + " HTTP/1.1\r\nHost: t\r\n");
  std::string got;
  // One header byte every 50 ms, forever: the deadline is for the whole head, not per byte.
  while (got.empty() && !conn.peer_closed() && test_clock::now() - t0 < 5s) {
    try {
      conn.send("X", 1s);
    } catch (const http_error&) {
      break;  // the gateway closed its side
    }
    got += conn.read_some(50ms);
  }
  got += conn.read_until_closed(2s);
  const auto elapsed = ms_double(test_clock::now() - t0).count();
  EXPECT_NE(got.find("HTTP/1.1 408"), std::string::npos) << got;
  EXPECT_TRUE(conn.peer_closed());
  EXPECT_GE(elapsed, 550.0);
  EXPECT_LT(elapsed, 600.0 + 1000.0);
  expect_still_serves();
}

TEST_F(HostileInputTest, SlowBodyGets408AtTheHeaderTimeout) {
  start("header_timeout_ms = 500");
  raw_connection conn{gw_->port()};
  const auto t0 = test_clock::now();
  conn.send("POST " + chat_path + " HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{\"mod");
  auto got = conn.read_until_closed(5s);
  const auto elapsed = ms_double(test_clock::now() - t0).count();
  EXPECT_NE(got.find("HTTP/1.1 408"), std::string::npos) << got;
  EXPECT_GE(elapsed, 450.0);
  EXPECT_LT(elapsed, 1500.0);
  expect_still_serves();
}

TEST_F(HostileInputTest, IdleKeepAliveConnectionIsClosedAfterTheKeepAliveTimeout) {
  start("keepalive_timeout_ms = 300");
  raw_connection conn{gw_->port()};
  conn.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
  auto first = parse_responses(conn.read_until("ok\n", 5s));
  ASSERT_EQ(first.size(), 1u);
  const auto t0 = test_clock::now();
  EXPECT_TRUE(conn.wait_closed(5s));
  const auto idle = ms_double(test_clock::now() - t0).count();
  EXPECT_GE(idle, 250.0);
  EXPECT_LT(idle, 1300.0);
  expect_still_serves();
}

TEST_F(HostileInputTest, ConnectionsBeyondMaxConnectionsAreRefusedCleanlyAndServedOnceOneFrees) {
  start("max_connections = 4");
  std::vector<std::unique_ptr<http_connection>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<http_connection>(gw_->port()));
    ASSERT_EQ(held.back()->request("GET", "/healthz").status, 200) << "connection " << i;
  }
  // The fifth is accepted by the kernel and closed at once by the gateway, without a byte.
  raw_connection extra{gw_->port()};
  try {
    extra.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
  } catch (const http_error&) {
  }
  EXPECT_EQ(extra.read_until_closed(5s), "");
  EXPECT_TRUE(extra.peer_closed());
  // The held ones still work.
  EXPECT_EQ(held[0]->request("GET", "/healthz").status, 200);
  held.pop_back();
  // The freed place is taken by a new connection (the close reaches the gateway shortly).
  int status = 0;
  for (int i = 0; i < 50 && status != 200; ++i) {
    try {
      status = request("POST", gw_->port(), chat_path, chat_body("chat")).status;
    } catch (const http_error&) {
      std::this_thread::sleep_for(20ms);  // polling a state no event announces to the client
    }
  }
  EXPECT_EQ(status, 200);
}

}  // namespace
}  // namespace tether::test
