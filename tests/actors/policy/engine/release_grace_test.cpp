#include "actors/policy/engine/release_grace.hpp"

#include <gtest/gtest.h>

namespace tether {
namespace {

using namespace std::chrono_literals;

constexpr release_facts cut_while_working{true, true, true, true};

TEST(ReleaseGraceTest, ACutAttemptHoldsItsSlotForThreeObservedStepsAndASlackBoundedByTheMaximum) {
  EXPECT_EQ(release_grace(cut_while_working, 30ms, 500ms), 140ms);
  EXPECT_EQ(release_grace(cut_while_working, 400ms, 500ms), 500ms);  // the bound
  EXPECT_EQ(release_grace(cut_while_working, 150ms, 500ms), 500ms);  // exactly at it
  EXPECT_EQ(release_grace(cut_while_working, 149ms, 500ms), 497ms);
}

TEST(ReleaseGraceTest, BeforeAnyStepWasObservedTheGraceIsTheBound) {
  EXPECT_EQ(release_grace(cut_while_working, std::nullopt, 500ms), 500ms);
  EXPECT_EQ(release_grace(cut_while_working, std::nullopt, 120ms), 120ms);
}

TEST(ReleaseGraceTest, AMaximumOfZeroReleasesAtTheClose) {
  EXPECT_EQ(release_grace(cut_while_working, 30ms, 0ms), 0ns);
  EXPECT_EQ(release_grace(cut_while_working, std::nullopt, 0ms), 0ns);
}

TEST(ReleaseGraceTest, WhereTheEngineCannotBeWorkingTheSlotGoesBackAtTheClose) {
  auto with = [](auto change) {
    release_facts f = cut_while_working;
    change(f);
    return release_grace(f, 30ms, 500ms);
  };
  EXPECT_EQ(with([](release_facts& f) { f.engine_named = false; }), 0ns);  // engine = "openai"
  EXPECT_EQ(with([](release_facts& f) { f.held_slot = false; }), 0ns);     // still queued
  EXPECT_EQ(with([](release_facts& f) { f.request_sent = false; }), 0ns);  // cut while connecting
  EXPECT_EQ(with([](release_facts& f) { f.cut = false; }), 0ns);           // the answer ended
}

}  // namespace
}  // namespace tether
