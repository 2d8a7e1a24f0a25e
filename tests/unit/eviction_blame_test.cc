// The plane bench's verdict on a healthy machine lost for silence
// (bench/plane/eviction_blame.h): the generator's lateness or the controller's.
#include <gtest/gtest.h>

#include "plane/eviction_blame.h"

namespace plane_bench {
namespace {

// Reports sent each second at 0, 1000, ... and answered 5 ms later.
std::vector<Send> OnTime(int64_t until_ms) {
  std::vector<Send> v;
  for (int64_t t = 0; t <= until_ms; t += 1000) v.push_back({t, t + 5});
  return v;
}

TEST(EvictionBlame, NoReportSentWhenOneWasDueIsTheGenerators) {
  // The last report at 3000 answered at 3005; none sent after; lost at 5100.
  EXPECT_EQ(BlameFor(OnTime(3000), 5100, 2095), Blame::kGenerator);
}

TEST(EvictionBlame, AReportSentInsideTheSilenceIsTheControllers) {
  // Sent at 4000, not heard: the controller counts silence from 3005.
  EXPECT_EQ(BlameFor(OnTime(4000), 5100, 2095), Blame::kUnheard);
}

TEST(EvictionBlame, AnAnswerStillAwaitedOrTooLateIsTheControllers) {
  std::vector<Send> v = OnTime(2000);
  v.push_back({3000, 0});  // never answered: the agent may not send the next
  EXPECT_EQ(BlameFor(v, 5100, 2100), Blame::kAnswerLate);
  v.back().answered_ms = 4500;  // answered, but its next report was not yet due
  EXPECT_EQ(BlameFor(v, 5100, 2100), Blame::kAnswerLate);
}

}  // namespace
}  // namespace plane_bench
