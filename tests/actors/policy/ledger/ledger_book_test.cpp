#include "actors/policy/ledger/ledger_book.hpp"

#include <gtest/gtest.h>

namespace tether::ledger {
namespace {

constexpr std::int64_t feb_29_2024 = 1709164800;
constexpr std::int64_t mar_1_2024 = 1709251200;
constexpr std::int64_t noon = feb_29_2024 + 12 * 3600;

// A store held in memory: what the book reads when a period begins, and how often it asks.
struct fake_store {
  std::vector<aggregate_row> rows;
  int reads = 0;
  std::map<std::string, usage_totals> totals(std::int64_t from, std::int64_t to) {
    ++reads;
    std::map<std::string, usage_totals> out;
    for (const auto& r : rows) {
      if (r.key.hour >= from && r.key.hour < to) out[r.key.key].add(r.totals);
    }
    return out;
  }
  ledger_book::stored_totals reader() {
    return [this](std::int64_t from, std::int64_t to) { return totals(from, to); };
  }
  void write(const usage_batch& b) { rows.insert(rows.end(), b.rows.begin(), b.rows.end()); }
};

ledger_entry entry(std::string key, std::uint64_t prompt, std::uint64_t completion,
                   period_usage admitted = {}) {
  ledger_entry e;
  e.key = std::move(key);
  e.model = "m";
  e.upstream = "u";
  e.usage.prompt = prompt;
  e.usage.completion = completion;
  e.admitted = admitted;
  return e;
}

TEST(LedgerBookTest, WhatTheStoreHoldsForTheDayCountsFromTheStart) {
  fake_store store;
  store.rows.push_back({{"alice", "m", "u", feb_29_2024 + 3600}, {.requests = 1, .prompt = 700}});
  store.rows.push_back({{"alice", "m", "u", feb_29_2024 - 3600}, {.requests = 1, .prompt = 50}});
  ledger_book book{store.reader()};
  EXPECT_EQ(book.settled("alice", period::day, noon).tokens, 700u);
  EXPECT_EQ(book.settled("alice", period::month, noon).tokens, 750u);
  EXPECT_EQ(book.settled("bob", period::day, noon).tokens, 0u);
  EXPECT_EQ(book.keys(noon), std::vector<std::string>{"alice"});
}

TEST(LedgerBookTest, AKeyPastItsDailyTokensIsRefusedAndAnotherKeyIsNot) {
  fake_store store;
  ledger_book book{store.reader()};
  const budget_limits limits{.tokens_per_day = 1000};
  ASSERT_TRUE(book.admit("alice", limits, {100, 0}, noon).admitted);
  book.record(entry("alice", 400, 600, {100, 0}), noon + 1);
  const auto v = book.admit("alice", limits, {100, 0}, noon + 2);
  EXPECT_FALSE(v.admitted);
  EXPECT_EQ(v.limit, budget_limit::tokens_per_day);
  EXPECT_EQ(v.retry_after_s, 12 * 3600 - 2);
  EXPECT_TRUE(v.settled);
  EXPECT_TRUE(book.admit("bob", limits, {100, 0}, noon + 2).admitted);
}

TEST(LedgerBookTest, AnAdmittedEstimateCountsUntilItsEntryReplacesItWithTheUsage) {
  fake_store store;
  ledger_book book{store.reader()};
  const budget_limits limits{.tokens_per_day = 1000};
  ASSERT_TRUE(book.admit("alice", limits, {1000, 0}, noon).admitted);
  EXPECT_EQ(book.in_flight("alice").tokens, 1000u);
  // The estimate alone reaches the limit: refused, but not settled.
  const auto v = book.admit("alice", limits, {50, 0}, noon);
  EXPECT_FALSE(v.admitted);
  EXPECT_FALSE(v.settled);
  // The request used far less than estimated: the key is admitted again.
  book.record(entry("alice", 20, 30, {1000, 0}), noon + 5);
  EXPECT_EQ(book.in_flight("alice").tokens, 0u);
  EXPECT_EQ(book.settled("alice", period::day, noon + 5).tokens, 50u);
  EXPECT_TRUE(book.admit("alice", limits, {50, 0}, noon + 6).admitted);
}

TEST(LedgerBookTest, ANewDayAdmitsAgainAndTheMonthKeepsCounting) {
  fake_store store;
  ledger_book book{store.reader()};
  const budget_limits limits{.tokens_per_day = 1000, .tokens_per_month = 5000};
  book.record(entry("alice", 500, 500), feb_29_2024 + 86399);
  EXPECT_FALSE(book.admit("alice", limits, {1, 0}, feb_29_2024 + 86399).admitted);
  // The records were flushed before midnight: the new day reads the store.
  while (const auto* b = book.next_batch()) {
    store.write(*b);
    book.written();
  }
  EXPECT_TRUE(book.admit("alice", limits, {1, 0}, mar_1_2024).admitted);
  EXPECT_EQ(book.settled("alice", period::day, mar_1_2024).tokens, 0u);
  // March is a new month too; February's thousand stay in February.
  EXPECT_EQ(book.settled("alice", period::month, mar_1_2024).tokens, 0u);
  EXPECT_EQ(book.settled("alice", period::month, feb_29_2024 + 100).tokens, 1000u);
}

TEST(LedgerBookTest, RowsNotYetStoredCountWhenAPeriodIsReadAgain) {
  fake_store store;
  ledger_book book{store.reader()};
  book.record(entry("alice", 300, 0), noon);
  // A batch handed out but not written (a failed flush), and a record after it.
  ASSERT_NE(book.next_batch(), nullptr);
  book.record(entry("alice", 200, 0), noon + 10);
  // Reading the day from a later month and back again reloads it from the store, which has
  // nothing: what waits for the store must still count.
  EXPECT_EQ(book.settled("alice", period::day, mar_1_2024).tokens, 0u);
  EXPECT_EQ(book.settled("alice", period::day, noon + 20).tokens, 500u);
  EXPECT_EQ(book.unwritten_rows(), 2u);
}

TEST(LedgerBookTest, AFailedBatchIsOfferedAgainWithTheSameRowsBeforeANewOne) {
  fake_store store;
  ledger_book book{store.reader()};
  book.record(entry("alice", 1, 1), noon);
  const auto* first = book.next_batch();
  ASSERT_NE(first, nullptr);
  const auto sequence = first->sequence;
  book.record(entry("bob", 2, 2), noon + 1);
  const auto* again = book.next_batch();
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->sequence, sequence);
  ASSERT_EQ(again->rows.size(), 1u);
  EXPECT_EQ(again->rows[0].key.key, "alice");
  store.write(*again);
  book.written();
  const auto* second = book.next_batch();
  ASSERT_NE(second, nullptr);
  EXPECT_GT(second->sequence, sequence);
  ASSERT_EQ(second->rows.size(), 1u);
  EXPECT_EQ(second->rows[0].key.key, "bob");
  store.write(*second);
  book.written();
  EXPECT_EQ(book.next_batch(), nullptr);
  EXPECT_EQ(book.unwritten_rows(), 0u);
  // Stored exactly once each.
  ASSERT_EQ(store.rows.size(), 2u);
}

TEST(LedgerBookTest, ThePeriodIsReadFromTheStoreOncePerPeriodNotPerRequest) {
  fake_store store;
  ledger_book book{store.reader()};
  const budget_limits limits{.tokens_per_day = 1'000'000};
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(book.admit("alice", limits, {10, 0}, noon + i).admitted);
    book.record(entry("alice", 5, 5, {10, 0}), noon + i);
  }
  EXPECT_EQ(store.reads, 2);  // the day and the month
  EXPECT_EQ(book.settled("alice", period::day, noon + 100).tokens, 1000u);
}

TEST(LedgerBookTest, SpendBudgetsCountTheRecordsSpend) {
  fake_store store;
  ledger_book book{store.reader()};
  const budget_limits limits{.spend_nanousd_per_month = 1'000'000'000};  // one dollar
  auto e = entry("alice", 1, 1);
  e.usage.spend_nanousd = 999'999'999;
  book.record(e, noon);
  EXPECT_TRUE(book.admit("alice", limits, {0, 0}, noon).admitted);
  e.usage.spend_nanousd = 1;
  book.record(e, noon);
  const auto v = book.admit("alice", limits, {0, 0}, noon);
  EXPECT_FALSE(v.admitted);
  EXPECT_EQ(v.limit, budget_limit::spend_per_month);
  EXPECT_EQ(v.retry_after_s, mar_1_2024 - noon);
}

}  // namespace
}  // namespace tether::ledger
