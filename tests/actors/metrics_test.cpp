// Unit tests for metrics: what /metrics renders from the counts the actors keep.
#include "actors/metrics.hpp"

#include <gtest/gtest.h>

#include <string>

namespace tether {
namespace {

std::string line_of(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  if (at == std::string::npos) return {};
  return text.substr(at + 1, text.find('\n', at + 1) - at - 1);
}

// A cluster member queues in two places (its budget during an outage, its link waiting for a
// lease); one writer must not overwrite the other's count.
TEST(MetricsTest, TheQueueDepthIsTheSumOfItsOwners) {
  metrics m{{"mock"}};
  m.queue_depth_set(metrics::queue_owner::budget, 2);
  m.queue_depth_set(metrics::queue_owner::link, 3);
  EXPECT_EQ(m.queue_depth(), 5);
  EXPECT_EQ(line_of(m.render(), "tether_queue_depth"), "tether_queue_depth 5");
  m.queue_depth_set(metrics::queue_owner::link, 0);
  EXPECT_EQ(line_of(m.render(), "tether_queue_depth"), "tether_queue_depth 2");
}

}  // namespace
}  // namespace tether
