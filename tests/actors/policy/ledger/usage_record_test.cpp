#include "actors/policy/ledger/usage_record.hpp"

#include <gtest/gtest.h>

namespace tether::ledger {
namespace {

TEST(UsageRecordTest, TotalsCountRequestsEstimatesAndEveryKindOfToken) {
  usage_totals t;
  t.add(usage_record{.prompt = 100,
                     .completion = 20,
                     .cached = 60,
                     .waste = 0,
                     .estimated = false,
                     .spend_nanousd = 7});
  t.add(usage_record{.prompt = 50,
                     .completion = 5,
                     .cached = 0,
                     .waste = 30,
                     .estimated = true,
                     .spend_nanousd = 3});
  EXPECT_EQ(t, (usage_totals{.requests = 2,
                             .estimated_requests = 1,
                             .prompt = 150,
                             .completion = 25,
                             .cached = 60,
                             .waste = 30,
                             .spend_nanousd = 10}));
  usage_totals twice = t;
  twice.add(t);
  EXPECT_EQ(twice, (usage_totals{.requests = 4,
                                 .estimated_requests = 2,
                                 .prompt = 300,
                                 .completion = 50,
                                 .cached = 120,
                                 .waste = 60,
                                 .spend_nanousd = 20}));
}

TEST(UsageRecordTest, ABudgetCountsWhatTheKeySentAndReceivedNotTheWaste) {
  usage_totals t;
  t.add(usage_record{.prompt = 100, .completion = 20, .cached = 60, .waste = 500});
  EXPECT_EQ(t.billed_tokens(), 120u);
}

}  // namespace
}  // namespace tether::ledger
