#include "net/shared_body.hpp"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

namespace tether::net {
namespace {

TEST(SharedBodyTest, NoBodyIsEmpty) {
  shared_body none;
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.size(), 0u);
  EXPECT_EQ(none.view(), "");
}

TEST(SharedBodyTest, ACopySendsTheSameBytesFromTheSameBuffer) {
  std::string text(64 * 1024, 'p');
  text.back() = '}';
  const char* original = text.data();
  shared_body body{std::move(text)};
  EXPECT_EQ(body.view().data(), original) << "the caller's bytes were copied on the way in";
  const shared_body attempt = body;
  EXPECT_EQ(attempt.size(), 64u * 1024);
  EXPECT_EQ(attempt.view().data(), body.view().data());
  EXPECT_EQ(static_cast<std::string_view>(attempt).back(), '}');
}

TEST(SharedBodyTest, TheBytesOutliveTheRequestThatHeldThemFirst) {
  shared_body kept;
  {
    shared_body first{std::string(R"({"model":"m"})")};
    kept = first;
  }
  EXPECT_EQ(kept.view(), R"({"model":"m"})");
}

}  // namespace
}  // namespace tether::net
