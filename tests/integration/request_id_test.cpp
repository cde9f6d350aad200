// A request's id (docs/contract.md, "Request headers the gateway reads" and "What the gateway
// sends upstream"): the caller's X-Request-Id is kept when it is 1 to 128 characters of
// [A-Za-z0-9._-], else one is generated; either way the same id is echoed to the caller, sent
// upstream on every attempt and written in the access log.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

// The contract's rule, written out here rather than taken from the gateway's own helper.
bool sane(const std::string& id) {
  static const std::regex rule{"[A-Za-z0-9._-]{1,128}"};
  return std::regex_match(id, rule);
}

// `n` characters cycling through every allowed one.
std::string id_of_length(std::size_t n) {
  static const std::string allowed =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-";
  std::string out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(allowed[i % allowed.size()]);
  return out;
}

class RequestIdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gw_ = std::make_unique<gateway_process>(
        gateway_config(mock_, "deadline_ms = 10000\nmax_retries = 2\nretry_backoff_ms = 1",
                       model_entry("chat", "mock") + model_entry("failing", "mock-fail-503")));
  }

  // The id the caller got back, after checking that the upstream and the access log carry that
  // same one, on each of the request's `attempts`.
  std::string id_through(const header_map& headers, const std::string& model = "chat",
                         std::size_t attempts = 1) {
    auto r = request("POST", gw_->port(), "/v1/chat/completions", chat_body(model), headers);
    EXPECT_EQ(r.status, model == "chat" ? 200 : 502) << r.body;
    const auto* echoed = r.header("x-request-id");
    if (echoed == nullptr) {
      ADD_FAILURE() << "no x-request-id on the response";
      return {};
    }
    EXPECT_EQ(entries_of(mock_.stats(), *echoed).size(), attempts)
        << "the upstream did not see the id the caller got: " << *echoed;
    auto line = access_line(*gw_, *echoed);
    EXPECT_TRUE(line) << "no access-log line under " << *echoed;
    if (line) {
      EXPECT_EQ(line->at("attempts").as_array().size(), attempts);
    }
    return *echoed;
  }

  void expect_kept(const std::string& id) {
    EXPECT_EQ(id_through({{"x-request-id", id}}), id) << "length " << id.size();
  }

  void expect_replaced(const std::string& id) {
    const auto got = id_through({{"x-request-id", id}});
    EXPECT_NE(got, id);
    EXPECT_TRUE(sane(got)) << got;
    EXPECT_TRUE(entries_of(mock_.stats(), id).empty()) << "the refused id went upstream: " << id;
  }

  mock_server mock_;
  std::unique_ptr<gateway_process> gw_;
};

TEST_F(RequestIdTest, AnIdOfOneTo128AllowedCharactersIsKept) {
  expect_kept(id_of_length(1));
  expect_kept(id_of_length(128));
  expect_kept("._-");  // the three punctuation characters alone
  expect_kept("Zz9");  // the letters' and digits' far ends
}

TEST_F(RequestIdTest, AnIdJustOutsideTheRuleIsReplacedByAGeneratedOne) {
  expect_replaced(id_of_length(129));
  expect_replaced("");
  // Each ASCII neighbour of an allowed range, and a space and a non-ASCII letter, inside an
  // otherwise good id.
  for (const std::string bad :
       {",", "/", ":", "@", "[", "^", "`", "{", "+", "~", " ", "\xc3\xa9"}) {
    expect_replaced("id" + bad + "x");
  }
}

TEST_F(RequestIdTest, AGeneratedIdIsTheOneSentUpstreamAndLogged) {
  std::set<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    const auto id = id_through({});
    EXPECT_TRUE(sane(id)) << id;
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 3u) << "each request gets its own id";
}

TEST_F(RequestIdTest, EveryAttemptOfARequestCarriesItsOneId) {
  // Three attempts (the first and two retries), all answered 503.
  const auto generated = id_through({}, "failing", 3);
  EXPECT_TRUE(sane(generated)) << generated;
  EXPECT_EQ(id_through({{"x-request-id", "kept-over-retries"}}, "failing", 3), "kept-over-retries");
}

}  // namespace
}  // namespace tether::test
