// The ledger actor under CAF's test coordinator, over a real store in a temporary file: records
// reach the file only through a flush (its timer's, a query's, or the actor's exit), budgets
// refuse and admit again on the test's own wall clock, and a query sees every record so far.
#include "actors/ledger_actor.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/actors/coordinator_fixture.hpp"
#include "tests/actors/manual_timers.hpp"

namespace tether {
namespace {

using stop_atom = caf::atom_constant<caf::atom("stop_now")>;

constexpr std::int64_t feb_29_2024 = 1709164800;
constexpr std::int64_t noon = feb_29_2024 + 12 * 3600;

struct verdict_log {
  std::optional<bool> admitted;
  std::int64_t retry_after_s = 0;
  std::string limit;
  std::optional<std::vector<ledger::usage_row>> rows;
};

// Asks the ledger once, as a request actor does, and notes the answer.
caf::behavior asker(caf::event_based_actor* self, caf::actor ledger, std::string key,
                    ledger::budget_limits limits, ledger::period_usage estimate,
                    std::shared_ptr<verdict_log> log) {
  self->request(ledger, caf::infinite, ledger_admit_atom::value, key, limits, estimate)
      .then([log](bool admitted, std::int64_t retry_after_s, std::string& limit, bool) {
        log->admitted = admitted;
        log->retry_after_s = retry_after_s;
        log->limit = limit;
      });
  return {[self](stop_atom) { self->quit(); }};
}

caf::behavior querier(caf::event_based_actor* self, caf::actor ledger, ledger::usage_query q,
                      std::shared_ptr<verdict_log> log) {
  self->request(ledger, caf::infinite, ledger_query_atom::value, q)
      .then([log](std::vector<ledger::usage_row>& rows) { log->rows = std::move(rows); });
  return {[self](stop_atom) { self->quit(); }};
}

// The timers and the clock outlive the actors that read them.
struct ledger_clocks {
  manual_timers timers_;
  std::int64_t wall_ = noon;
};

class LedgerActorTest : protected ledger_clocks, public coordinator_fixture {
 protected:
  LedgerActorTest() {
    dir_ = std::filesystem::temp_directory_path() /
           ("tether-ledger-actor-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    store_ = std::make_shared<ledger::ledger_store>(dir_ / "ledger.db");
    tally_ = std::make_shared<ledger::ledger_tally>(2);
    ledger_ =
        system_.spawn(ledger_actor, ledger_setup{store_, std::chrono::milliseconds(1000), nullptr,
                                                 &timers_, [this] { return wall_; }, tally_});
    run();
  }
  ~LedgerActorTest() override {
    for (auto& a : helpers_) caf::anon_send(a, stop_atom::value);
    if (ledger_) caf::anon_send_exit(ledger_, caf::exit_reason::user_shutdown);
    run();
    std::filesystem::remove_all(dir_);
  }

  void record(const std::string& key, std::uint64_t prompt, std::uint64_t completion,
              ledger::period_usage admitted = {}) {
    ledger::ledger_entry e;
    e.key = key;
    e.model = "m";
    e.upstream = "u";
    e.usage.prompt = prompt;
    e.usage.completion = completion;
    e.admitted = admitted;
    caf::anon_send(ledger_, ledger_record_atom::value, e);
    run();
  }

  std::shared_ptr<verdict_log> admit(const std::string& key, ledger::budget_limits limits,
                                     ledger::period_usage estimate) {
    auto log = std::make_shared<verdict_log>();
    helpers_.push_back(system_.spawn(asker, ledger_, key, limits, estimate, log));
    run();
    return log;
  }

  std::uint64_t stored_tokens(const std::string& key) {
    const auto totals = store_->totals_per_key(feb_29_2024, feb_29_2024 + 86400);
    const auto it = totals.find(key);
    return it == totals.end() ? 0 : it->second.billed_tokens();
  }

  std::filesystem::path dir_;
  std::shared_ptr<ledger::ledger_store> store_;
  std::shared_ptr<ledger::ledger_tally> tally_;
  caf::actor ledger_;
  std::vector<caf::actor> helpers_;
};

TEST_F(LedgerActorTest, RecordsReachTheFileAtTheFlushIntervalNotBefore) {
  record("alice", 10, 5);
  record("alice", 1, 1);
  EXPECT_EQ(stored_tokens("alice"), 0u);
  timers_.advance(std::chrono::milliseconds(999));
  run();
  EXPECT_EQ(stored_tokens("alice"), 0u);
  timers_.advance(std::chrono::milliseconds(1));
  run();
  EXPECT_EQ(stored_tokens("alice"), 17u);
  // The timer is armed again: the next records go at the next interval.
  record("alice", 3, 0);
  timers_.advance(std::chrono::milliseconds(1000));
  run();
  EXPECT_EQ(stored_tokens("alice"), 20u);
}

TEST_F(LedgerActorTest, WhatRequestsLeftInTheTallyIsWrittenAtTheFlushAndCountsForBudgets) {
  ledger::usage_record r;
  r.prompt = 30;
  r.completion = 20;
  tally_->add("alice", "m", "u", r);
  tally_->add("alice", "m", "u", r);
  run();
  EXPECT_EQ(stored_tokens("alice"), 0u);
  timers_.advance(std::chrono::milliseconds(1000));
  run();
  EXPECT_EQ(stored_tokens("alice"), 100u);
  const ledger::budget_limits limits{.tokens_per_day = 100};
  EXPECT_EQ(admit("alice", limits, {1, 0})->admitted, false);
}

TEST_F(LedgerActorTest, TheActorsExitWritesWhatIsLeftSoACleanStopLosesNothing) {
  ledger::usage_record r;
  r.prompt = 8;
  tally_->add("alice", "m", "u", r);
  record("alice", 40, 2);
  caf::anon_send_exit(ledger_, caf::exit_reason::user_shutdown);
  run();
  ledger_ = nullptr;
  EXPECT_EQ(stored_tokens("alice"), 50u);
}

TEST_F(LedgerActorTest, AKeyPastItsDayIsRefusedUntilTheNextDayAndAnotherKeyIsNot) {
  const ledger::budget_limits limits{.tokens_per_day = 100};
  auto first = admit("alice", limits, {30, 0});
  ASSERT_EQ(first->admitted, true);
  record("alice", 60, 40, {30, 0});
  auto refused = admit("alice", limits, {30, 0});
  ASSERT_EQ(refused->admitted, false);
  EXPECT_EQ(refused->limit, "max_tokens_per_day");
  EXPECT_EQ(refused->retry_after_s, 12 * 3600);
  EXPECT_EQ(admit("bob", limits, {30, 0})->admitted, true);
  // The wall clock rolls over to March 1st: a new day and a new month.
  wall_ = feb_29_2024 + 86400;
  EXPECT_EQ(admit("alice", limits, {30, 0})->admitted, true);
}

TEST_F(LedgerActorTest, AQuerySeesEveryRecordSoFar) {
  record("alice", 10, 5);
  record("bob", 1, 2);
  auto log = std::make_shared<verdict_log>();
  helpers_.push_back(system_.spawn(querier, ledger_, ledger::usage_query{}, log));
  run();
  ASSERT_TRUE(log->rows.has_value());
  ASSERT_EQ(log->rows->size(), 2u);
  EXPECT_EQ((*log->rows)[0].key, "alice");
  EXPECT_EQ((*log->rows)[0].totals.prompt, 10u);
  EXPECT_EQ((*log->rows)[1].key, "bob");
  EXPECT_EQ((*log->rows)[1].totals.completion, 2u);
}

}  // namespace
}  // namespace tether
