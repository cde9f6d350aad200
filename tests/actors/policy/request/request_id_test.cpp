#include "actors/policy/request/request_id.hpp"

#include <gtest/gtest.h>

#include <set>

namespace tether {
namespace {

TEST(RequestIdTest, SaneCallerIdIsKept) {
  std::string id = "abc-DEF_1.2";
  EXPECT_EQ(accept_or_generate_request_id(&id), id);
}

TEST(RequestIdTest, InsaneCallerIdIsReplaced) {
  for (std::string bad : {std::string{}, std::string(129, 'a'), std::string{"a b"},
                          std::string{"a\r\nx: y"}, std::string{"ü"}}) {
    auto out = accept_or_generate_request_id(&bad);
    EXPECT_NE(out, bad);
    EXPECT_TRUE(is_sane_request_id(out));
  }
}

TEST(RequestIdTest, GeneratedIdsAreUniqueAndSane) {
  std::set<std::string> ids;
  for (int i = 0; i < 1000; ++i) ids.insert(accept_or_generate_request_id(nullptr));
  EXPECT_EQ(ids.size(), 1000u);
  EXPECT_TRUE(is_sane_request_id(*ids.begin()));
}

}  // namespace
}  // namespace tether
