#include "actors/policy/ledger/utc_period.hpp"

#include <gtest/gtest.h>

namespace tether::ledger {
namespace {

// Unix times of UTC midnights, from Python's calendar.timegm.
constexpr std::int64_t feb_1_2024 = 1706745600;
constexpr std::int64_t feb_29_2024 = 1709164800;
constexpr std::int64_t mar_1_2024 = 1709251200;

TEST(UtcPeriodTest, AnHourStartsOnTheHourAndATimeBefore1970BelongsToTheHourBeforeIt) {
  EXPECT_EQ(hour_start(feb_29_2024 + 3599), feb_29_2024);
  EXPECT_EQ(hour_start(feb_29_2024 + 3600), feb_29_2024 + 3600);
  EXPECT_EQ(hour_start(0), 0);
  EXPECT_EQ(hour_start(-1), -3600);
}

TEST(UtcPeriodTest, ADayRunsFromUtcMidnightToTheNext) {
  EXPECT_EQ(span_of(period::day, feb_29_2024 + 12 * 3600), (period_span{feb_29_2024, mar_1_2024}));
  EXPECT_EQ(span_of(period::day, feb_29_2024), (period_span{feb_29_2024, mar_1_2024}));
  EXPECT_EQ(span_of(period::day, mar_1_2024 - 1), (period_span{feb_29_2024, mar_1_2024}));
  EXPECT_EQ(span_of(period::day, -1), (period_span{-86400, 0}));
}

TEST(UtcPeriodTest, AMonthHasItsCalendarLengthWithLeapYearsByTheGregorianRule) {
  // 2024 is a leap year: February has 29 days.
  EXPECT_EQ(span_of(period::month, feb_29_2024 + 5), (period_span{feb_1_2024, mar_1_2024}));
  EXPECT_EQ(mar_1_2024 - feb_1_2024, 29 * 86400);
  // 2023 is not.
  EXPECT_EQ(span_of(period::month, 1675209600 + 86400 * 27 + 86399),
            (period_span{1675209600, 1677628800}));
  // 2100 is divisible by 100 and not 400: no leap year. 2000 is divisible by 400: leap.
  EXPECT_EQ(span_of(period::month, 4105123200), (period_span{4105123200, 4107542400}));
  EXPECT_EQ(4107542400 - 4105123200, 28 * 86400);
  EXPECT_EQ(span_of(period::month, 951868800 - 1), (period_span{949363200, 951868800}));
  EXPECT_EQ(951868800 - 949363200, 29 * 86400);
  // December runs into January of the next year; 31 days.
  EXPECT_EQ(span_of(period::month, 1796601600), (period_span{1796083200, 1798761600}));
  EXPECT_EQ(1798761600 - 1796083200, 31 * 86400);
  // Before 1970.
  EXPECT_EQ(span_of(period::month, -1), (period_span{-2678400, 0}));
}

TEST(UtcPeriodTest, TheSecondsToThePeriodsEndAreAtLeastOneAndAWholePeriodAtItsStart) {
  EXPECT_EQ(seconds_to_end(period::day, mar_1_2024 - 1), 1);
  EXPECT_EQ(seconds_to_end(period::day, feb_29_2024), 86400);
  EXPECT_EQ(seconds_to_end(period::month, mar_1_2024 - 1), 1);
  EXPECT_EQ(seconds_to_end(period::month, feb_1_2024), 29 * 86400);
  EXPECT_EQ(seconds_to_end(period::month, feb_29_2024 + 3600), 86400 - 3600);
}

}  // namespace
}  // namespace tether::ledger
