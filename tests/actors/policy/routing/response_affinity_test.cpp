#include "actors/policy/routing/response_affinity.hpp"

#include <gtest/gtest.h>

#include <string>

namespace tether {
namespace {

TEST(ResponseAffinityTest, AnIdIsFoundOnTheUpstreamThatMadeItAndAnUnknownOneIsNot) {
  response_affinity map{10};
  map.learn("resp_a", 1);
  map.learn("resp_b", 0);
  EXPECT_EQ(map.find("resp_a"), 1U);
  EXPECT_EQ(map.find("resp_b"), 0U);
  EXPECT_EQ(map.find("resp_c"), std::nullopt);
  map.learn("resp_a", 2);  // made again elsewhere: the newer answer wins, no second entry
  EXPECT_EQ(map.find("resp_a"), 2U);
  EXPECT_EQ(map.size(), 2U);
}

TEST(ResponseAffinityTest, PastItsCapacityTheOldestIdsAreDropped) {
  response_affinity map{3};
  for (int i = 0; i < 5; ++i) map.learn("resp_" + std::to_string(i), static_cast<std::size_t>(i));
  EXPECT_EQ(map.size(), 3U);
  EXPECT_EQ(map.find("resp_0"), std::nullopt);
  EXPECT_EQ(map.find("resp_1"), std::nullopt);
  EXPECT_EQ(map.find("resp_2"), 2U);
  EXPECT_EQ(map.find("resp_4"), 4U);
  map.set_capacity(1);
  EXPECT_EQ(map.size(), 1U);
  EXPECT_EQ(map.find("resp_4"), 4U);
  map.set_capacity(0);
  map.learn("resp_9", 1);
  EXPECT_EQ(map.size(), 0U) << "a capacity of 0 remembers nothing";
}

TEST(ResponseAffinityTest, EmptyOrOverlongIdsAreNotKept) {
  response_affinity map{10};
  map.learn("", 1);
  map.learn(std::string(257, 'x'), 1);
  EXPECT_EQ(map.size(), 0U);
}

TEST(ResponseAffinityTest, ThePreviousResponseIdIsReadFromTheTopLevelOnly) {
  EXPECT_EQ(previous_response_id_of(R"({"model":"m","previous_response_id":"resp_1","input":"x"})"),
            "resp_1");
  EXPECT_EQ(previous_response_id_of(R"({"model":"m","input":"x"})"), std::nullopt);
  EXPECT_EQ(previous_response_id_of(R"({"model":"m","input":"previous_response_id"})"),
            std::nullopt);
  EXPECT_EQ(previous_response_id_of(R"({"model":"m","x":{"previous_response_id":"resp_1"}})"),
            std::nullopt);
  EXPECT_EQ(previous_response_id_of(R"({"model":"m","previous_response_id":null})"), std::nullopt);
  EXPECT_EQ(previous_response_id_of(R"({"previous_response_id":"resp_1")"), std::nullopt);
}

TEST(ResponseAffinityTest, TheIdOfAWholeResponseAndOfAStreamsEventAreRead) {
  EXPECT_EQ(response_id_of(R"({"id":"resp_9","object":"response","status":"completed"})"),
            "resp_9");
  EXPECT_EQ(response_id_of("not json"), std::nullopt);
  EXPECT_EQ(response_id_of(R"({"object":"response"})"), std::nullopt);

  EXPECT_EQ(response_id_of_event("event: response.created\n"
                                 "data: {\"type\":\"response.created\",\"sequence_number\":0,"
                                 "\"response\":{\"id\":\"resp_7\",\"object\":\"response\"}}\n\n"),
            "resp_7");
  EXPECT_EQ(response_id_of_event("event: response.created\r\ndata:{\"response\":{\"id\":\"r\"}}"
                                 "\r\n\r\n"),
            "r");
  EXPECT_EQ(response_id_of_event("event: response.output_text.delta\n"
                                 "data: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}"
                                 "\n\n"),
            std::nullopt);
  EXPECT_EQ(response_id_of_event(": a comment\n\n"), std::nullopt);
}

}  // namespace
}  // namespace tether
