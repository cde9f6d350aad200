// Where the gateway's requests land on an upstream (docs/contract.md, "HTTP surface" and
// "Upstream health"): a base_url's path prefix comes before every surface's /v1/... path, and the
// active health check goes to the server's root, not under that prefix.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

const std::string prefix = "/some/prefix";

struct surface_case {
  const char* path;
  const char* body_fields;  // after "model"
};

// One request per surface, each with the fields its API requires.
const std::vector<surface_case> every_path = {
    {"/v1/chat/completions", R"("messages":[{"role":"user","content":"hi"}])"},
    {"/v1/completions", R"("prompt":"hi")"},
    {"/v1/embeddings", R"("input":"hi")"},
    {"/v1/responses", R"("input":"hi")"},
    {"/v1/messages", R"("max_tokens":8,"messages":[{"role":"user","content":"hi"}])"},
    {"/v1/messages/count_tokens", R"("messages":[{"role":"user","content":"hi"}])"},
};

std::string config_with(const std::string& base_url, const std::string& upstream_more = "") {
  return "[server]\nlisten = \"127.0.0.1:0\"\n\n[request]\ndeadline_ms = 10000\nmax_retries = "
         "0\n\n[[upstreams]]\nname = \"mock\"\nbase_url = \"" +
         base_url + "\"\n" + every_surface + "\n" + upstream_more + "\n\n" +
         model_entry("chat", "mock") + "\n[telemetry]\nlog_format = \"json\"\n";
}

class UpstreamPathTest : public ::testing::Test {
 protected:
  static mock_options prefixed() {
    mock_options o;
    o.path_prefix = prefix;
    return o;
  }

  mock_server mock_{prefixed()};
};

// The mock serves its API only under the prefix (404 elsewhere), and logs each path as received.
TEST_F(UpstreamPathTest, EverySurfaceGoesUnderTheBaseUrlsPathPrefix) {
  // A trailing slash on the prefix names the same place; it does not double the slash.
  for (const auto& base_url : {mock_.url() + prefix, mock_.url() + prefix + "/"}) {
    mock_.reset();
    gateway_process gw{config_with(base_url)};
    for (const auto& s : every_path) {
      const std::string id = "p" + std::to_string(&s - every_path.data());
      auto r =
          request("POST", gw.port(), s.path,
                  std::string(R"({"model":"chat",)") + s.body_fields + "}", {{"x-request-id", id}});
      EXPECT_EQ(r.status, 200) << base_url << " " << s.path << ": " << r.body;
      auto seen = entries_of(mock_.stats(), id);
      ASSERT_EQ(seen.size(), 1u) << base_url << " " << s.path;
      EXPECT_EQ(str(seen[0].at("path")), prefix + s.path) << base_url;
    }
  }
}

TEST_F(UpstreamPathTest, HealthCheckGoesToTheServerRootNotUnderThePrefix) {
  gateway_process gw{
      config_with(mock_.url() + prefix, "health_path = \"/health\"\nhealth_interval_ms = 100")};
  // The mock counts only GET /health at its root; under the prefix it answers 404, which would
  // fail the check and eject the upstream.
  auto checked =
      mock_.wait_for_stats([](const auto& s) { return num(s.at("health_checks")) >= 3; }, 5s);
  ASSERT_GE(num(checked.at("health_checks")), 3) << "no health check reached /health at the root";
  EXPECT_EQ(metric(gw.port(), "tether_upstream_healthy{upstream=\"mock\"}"), 1);
  EXPECT_EQ(gw.process().output().find("health check failed"), std::string::npos)
      << gw.process().output();
  // The traffic still goes under the prefix.
  auto r = request("POST", gw.port(), "/v1/chat/completions", chat_body("chat"),
                   {{"x-request-id", "after-checks"}});
  EXPECT_EQ(r.status, 200) << r.body;
  auto seen = entries_of(mock_.stats(), "after-checks");
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(str(seen[0].at("path")), prefix + "/v1/chat/completions");
}

// The query string of the incoming path goes on as it came (Claude Code sends
// /v1/messages?beta=true), after the prefix and the path, and the access line logs it.
TEST_F(UpstreamPathTest, TheQueryStringIsForwardedAsItCameAndLogged) {
  gateway_process gw{config_with(mock_.url() + prefix)};
  auto r = request("POST", gw.port(), "/v1/messages?beta=true&x=a%20b",
                   R"({"model":"chat","max_tokens":8,"messages":[{"role":"user","content":"hi"}]})",
                   {{"x-request-id", "with-query"}});
  EXPECT_EQ(r.status, 200) << r.body;
  auto seen = entries_of(mock_.stats(), "with-query");
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(str(seen[0].at("path")), prefix + "/v1/messages");
  ASSERT_TRUE(seen[0].contains("query")) << boost::json::serialize(seen[0]);
  EXPECT_EQ(str(seen[0].at("query")), "beta=true&x=a%20b");
  auto line = access_line(gw, "with-query");
  ASSERT_TRUE(line);
  EXPECT_EQ(str(line->at("path")), "/v1/messages?beta=true&x=a%20b");
  // A path without one sends none.
  request("POST", gw.port(), "/v1/messages",
          R"({"model":"chat","max_tokens":8,"messages":[{"role":"user","content":"hi"}]})",
          {{"x-request-id", "without-query"}});
  auto plain = entries_of(mock_.stats(), "without-query");
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_FALSE(plain[0].contains("query"));
}

}  // namespace
}  // namespace tether::test
