#include "actors/policy/ledger/usage_aggregator.hpp"

#include <gtest/gtest.h>

#include <algorithm>

namespace tether::ledger {
namespace {

constexpr std::int64_t hour = 1709164800;  // 2024-02-29 00:00 UTC

usage_record tokens(std::uint64_t prompt, std::uint64_t completion, bool estimated = false) {
  return usage_record{.prompt = prompt, .completion = completion, .estimated = estimated};
}

std::vector<aggregate_row> sorted(std::vector<aggregate_row> rows) {
  std::sort(rows.begin(), rows.end(), [](const aggregate_row& a, const aggregate_row& b) {
    return std::tie(a.key.key, a.key.model, a.key.upstream, a.key.hour) <
           std::tie(b.key.key, b.key.model, b.key.upstream, b.key.hour);
  });
  return rows;
}

TEST(UsageAggregatorTest, RecordsOfOneKeyModelUpstreamAndHourMergeIntoOneRow) {
  usage_aggregator agg;
  agg.add("alice", "m", "u1", hour + 5, tokens(10, 1));
  agg.add("alice", "m", "u1", hour + 3599, tokens(20, 2, true));
  EXPECT_EQ(agg.rows(), 1u);
  const auto batch = agg.take_batch();
  ASSERT_EQ(batch.rows.size(), 1u);
  EXPECT_EQ(batch.rows[0].key, (aggregate_key{"alice", "m", "u1", hour}));
  EXPECT_EQ(batch.rows[0].totals,
            (usage_totals{.requests = 2, .estimated_requests = 1, .prompt = 30, .completion = 3}));
}

TEST(UsageAggregatorTest, EachDimensionMakesARowOfItsOwn) {
  usage_aggregator agg;
  agg.add("alice", "m", "u1", hour, tokens(1, 0));
  agg.add("bob", "m", "u1", hour, tokens(2, 0));
  agg.add("alice", "n", "u1", hour, tokens(3, 0));
  agg.add("alice", "m", "u2", hour, tokens(4, 0));
  agg.add("alice", "m", "u1", hour + 3600, tokens(5, 0));
  agg.add("alice", "m", "u1", hour - 1, tokens(6, 0));
  const auto rows = sorted(agg.take_batch().rows);
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(rows[0].key, (aggregate_key{"alice", "m", "u1", hour - 3600}));
  EXPECT_EQ(rows[0].totals.prompt, 6u);
  EXPECT_EQ(rows[1].key, (aggregate_key{"alice", "m", "u1", hour}));
  EXPECT_EQ(rows[1].totals.prompt, 1u);
  EXPECT_EQ(rows[2].key, (aggregate_key{"alice", "m", "u1", hour + 3600}));
  EXPECT_EQ(rows[3].key, (aggregate_key{"alice", "m", "u2", hour}));
  EXPECT_EQ(rows[4].key, (aggregate_key{"alice", "n", "u1", hour}));
  EXPECT_EQ(rows[5].key, (aggregate_key{"bob", "m", "u1", hour}));
}

TEST(UsageAggregatorTest, ABatchTakesEverythingAndTheNextStartsEmptyWithTheNextSequence) {
  usage_aggregator agg;
  agg.add("alice", "m", "u1", hour, tokens(1, 1));
  const auto first = agg.take_batch();
  EXPECT_EQ(first.sequence, 1u);
  EXPECT_EQ(first.rows.size(), 1u);
  EXPECT_TRUE(agg.empty());
  agg.add("alice", "m", "u1", hour, tokens(2, 2));
  const auto second = agg.take_batch();
  EXPECT_EQ(second.sequence, 2u);
  ASSERT_EQ(second.rows.size(), 1u);
  // Not the first batch's tokens again.
  EXPECT_EQ(second.rows[0].totals, (usage_totals{.requests = 1, .prompt = 2, .completion = 2}));
}

TEST(UsageAggregatorTest, TheUnflushedUsageOfAKeyCountsOnlyItsRecordsInThePeriod) {
  usage_aggregator agg;
  agg.add("alice", "m", "u1", hour - 1, tokens(1000, 0));  // the day before
  agg.add("alice", "m", "u1", hour, tokens(10, 1));
  agg.add("alice", "n", "u2", hour + 86399, tokens(20, 2));
  agg.add("alice", "m", "u1", hour + 86400, tokens(3000, 0));  // the day after
  agg.add("bob", "m", "u1", hour, tokens(500, 0));
  const auto day = agg.unflushed("alice", hour, hour + 86400);
  EXPECT_EQ(day, (usage_totals{.requests = 2, .prompt = 30, .completion = 3}));
  EXPECT_EQ(agg.unflushed("carol", hour, hour + 86400), usage_totals{});
}

}  // namespace
}  // namespace tether::ledger
