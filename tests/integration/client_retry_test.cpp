// The access log's client_retry (docs/contract.md, "Request headers the gateway reads" and
// "Access log"): the SDKs' x-stainless-retry-count when it is a non-negative integer of at most
// 6 digits, else null — recorded, never acted on.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

struct retry_case {
  std::optional<std::string> header;   // nullopt: not sent
  std::optional<std::int64_t> logged;  // nullopt: null
};

class ClientRetryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gw_ = std::make_unique<gateway_process>(
        gateway_config(mock_, "deadline_ms = 10000", model_entry("chat", "mock")));
  }

  // The access line's client_retry of a request sent with `c.header`, to `model`.
  void expect_logged(const retry_case& c, const std::string& model, int status) {
    const std::string id = "retry-" + std::to_string(next_++);
    header_map headers{{"x-request-id", id}};
    if (c.header) headers.emplace_back("x-stainless-retry-count", *c.header);
    auto r = request("POST", gw_->port(), "/v1/chat/completions", chat_body(model), headers);
    const std::string shown = c.header ? "\"" + *c.header + "\"" : "absent";
    EXPECT_EQ(r.status, status) << shown << ": " << r.body;
    auto line = access_line(*gw_, id);
    ASSERT_TRUE(line) << shown;
    const auto& v = line->at("client_retry");
    if (c.logged) {
      ASSERT_TRUE(v.is_int64()) << shown << " logged " << boost::json::serialize(v);
      EXPECT_EQ(v.as_int64(), *c.logged) << shown;
    } else {
      EXPECT_TRUE(v.is_null()) << shown << " logged " << boost::json::serialize(v);
    }
  }

  mock_server mock_;
  std::unique_ptr<gateway_process> gw_;
  int next_ = 0;
};

TEST_F(ClientRetryTest, UpToSixDigitsAreLoggedAsTheNumber) {
  for (const auto& c : std::vector<retry_case>{
           {"0", 0}, {"2", 2}, {"999999", 999999}, {"000042", 42}}) {  // six digits, leading zeros
    expect_logged(c, "chat", 200);
  }
  // One the gateway refuses before any upstream (an unknown model) is logged the same way.
  expect_logged({"3", 3}, "no-such-model", 404);
}

TEST_F(ClientRetryTest, AnythingElseIsLoggedAsNullAndChangesNothing) {
  for (const auto& c : std::vector<retry_case>{{std::nullopt, std::nullopt},
                                               {"1000000", std::nullopt},  // seven digits
                                               {"0000001", std::nullopt},
                                               {"", std::nullopt},
                                               {"-1", std::nullopt},
                                               {"+1", std::nullopt},
                                               {"1.0", std::nullopt},
                                               {"1e3", std::nullopt},
                                               {"0x1", std::nullopt},
                                               {"two", std::nullopt}}) {
    expect_logged(c, "chat", 200);
  }
  // Each request reached the upstream once: the header is never acted on.
  EXPECT_EQ(num(mock_.stats().at("requests")), 10);
}

}  // namespace
}  // namespace tether::test
