#include "actors/policy/request/outcome.hpp"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <string>

namespace tether {
namespace {

// What error_body wrote through a boost::json DOM before it was written by hand: the same bytes.
std::string through_boost_json(outcome o, std::string_view message, std::string_view request_id) {
  boost::json::object err;
  err["message"] = message;
  err["type"] = error_type_of(o);
  err["code"] = to_string(o);
  err["request_id"] = request_id;
  boost::json::object root;
  root["error"] = std::move(err);
  return boost::json::serialize(root);
}

TEST(OutcomeTest, ErrorBodyIsTheDocumentBoostJsonWrites) {
  const std::string control{"bell \x07 nul \0 unit \x1f end", 24};
  const std::string_view messages[] = {
      "the request deadline passed",          R"(quote " backslash \ slash /)",
      "line\nbreak\rreturn\ttab\bback\fform", control,
      "utf-8: caf\xc3\xa9 \xe2\x9c\x93",      "",
  };
  for (const auto message : messages) {
    for (const auto o : {outcome::deadline_exceeded, outcome::bad_request, outcome::overloaded}) {
      EXPECT_EQ(error_body(o, message, "req-\"1\""), through_boost_json(o, message, "req-\"1\""))
          << message;
    }
  }
}

TEST(OutcomeTest, ErrorBodyParsesBackToItsFields) {
  const auto body = error_body(outcome::deadline_exceeded, "a \"quoted\"\nmessage", "id-7");
  const auto doc = boost::json::parse(body);
  const auto& err = doc.at("error");
  EXPECT_EQ(err.at("message").as_string(), "a \"quoted\"\nmessage");
  EXPECT_EQ(err.at("code").as_string(), "deadline_exceeded");
  EXPECT_EQ(err.at("type").as_string(), error_type_of(outcome::deadline_exceeded));
  EXPECT_EQ(err.at("request_id").as_string(), "id-7");
}

}  // namespace
}  // namespace tether
