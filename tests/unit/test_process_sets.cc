// Process sets' pure parts: the table every rank keeps (negotiation/process_sets.h), the checks of
// a new set's ranks, the tensor-name label the timeline and `ranktime check` read back
// (timeline/process_set_label.h).
#include "negotiation/process_sets.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ranktime/timeline/process_set_label.h"

namespace ranktime {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(ProcessSetLabel, RunsOfThreeOrMoreAreRanges) {
  EXPECT_EQ(timeline::process_set_label(1, {0, 2}), " [process set 1: ranks 0,2]");
  EXPECT_EQ(timeline::process_set_label(7, {0, 1, 2, 3, 5, 6, 9, 10, 11}),
            " [process set 7: ranks 0-3,5,6,9-11]");
  EXPECT_EQ(timeline::process_set_label(2, {4}), " [process set 2: ranks 4]");
}

TEST(ProcessSetLabel, ParsesWhatItWrites) {
  const std::vector<std::vector<int>> sets = {
      {0}, {1, 3}, {0, 1, 2}, {0, 1, 2, 3, 5, 6, 9, 10, 11}, {7, 8, 9, 20}};
  for (const auto& ranks : sets) {
    EXPECT_EQ(timeline::process_set_ranks_in("allreduce.x" + timeline::process_set_label(3, ranks)),
              ranks);
  }
}

TEST(ProcessSetLabel, NamesWithoutAWellFormedLabelHaveNoRanks) {
  for (const char* name :
       {"allreduce.x", "", "]", "x [process set 1: ranks ]", "x [process set 1: ranks 0,2",
        "x [process set 1: ranks 2,0]", "x [process set 1: ranks 0,0]",
        "x [process set 1: ranks 3-1]", "x [process set : ranks 0]",
        "x [process set 1: ranks 0,,2]", "x [process set 1: ranks -1]",
        "x [process set 1: ranks 0-99999999999]", "x [process set 1: ranks 0] trailing"}) {
    EXPECT_THAT(timeline::process_set_ranks_in(name), IsEmpty()) << name;
  }
}

TEST(ProcessSets, TextAndTensorNames) {
  const ProcessSet set{3, {0, 2, 4, 5, 6}};
  EXPECT_EQ(process_set_text(set), "process set 3 (ranks 0,2,4-6)");
  EXPECT_EQ(set_tensor_name("allreduce.w", set), "allreduce.w [process set 3: ranks 0,2,4-6]");
  EXPECT_TRUE(set.contains(4));
  EXPECT_FALSE(set.contains(1));
  EXPECT_EQ(set.rank_of(5), 3);
  EXPECT_EQ(set.rank_of(7), -1);
}

TEST(ProcessSets, RanksArgumentRoundTripsAndRejectsJunk) {
  std::vector<int> ranks;
  std::string error;
  ASSERT_TRUE(parse_ranks_argument(ranks_argument({0, 5, 12}), &ranks, &error));
  EXPECT_THAT(ranks, ElementsAre(0, 5, 12));
  for (const char* junk : {"a", "1,b", "1;2", "1,,2", "99999999999"}) {
    EXPECT_FALSE(parse_ranks_argument(junk, &ranks, &error)) << junk;
    EXPECT_THAT(error, ::testing::HasSubstr("is not a list of ranks"));
  }
}

TEST(ProcessSets, NewSetRanksAreChecked) {
  EXPECT_EQ(check_set_ranks({0, 3}, 4), "");
  EXPECT_EQ(check_set_ranks({}, 4), "a process set needs at least one rank");
  EXPECT_EQ(check_set_ranks({0, 4}, 4), "rank 4 is not a rank of this job of 4 ranks (0..3)");
  EXPECT_EQ(check_set_ranks({-1, 2}, 4), "rank -1 is not a rank of this job of 4 ranks (0..3)");
  EXPECT_EQ(check_set_ranks({1, 1}, 4), "rank 1 appears twice in the process set's ranks");
}

TEST(ProcessSets, TableKeepsSetZeroAndNeverReusesIds) {
  ProcessSets sets(4);
  ASSERT_NE(sets.find(kGlobalSet), nullptr);
  EXPECT_THAT(sets.find(kGlobalSet)->ranks, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(sets.next_id(), 1);
  sets.add(1, {0, 2});
  sets.add(2, {1, 3});
  EXPECT_THAT(sets.ids(), ElementsAre(0, 1, 2));
  EXPECT_EQ(sets.with_ranks({1, 3})->id, 2);
  EXPECT_EQ(sets.with_ranks({0, 1, 2, 3})->id, kGlobalSet);
  EXPECT_EQ(sets.with_ranks({0, 1}), nullptr);
  EXPECT_FALSE(sets.remove(kGlobalSet));
  EXPECT_TRUE(sets.remove(2));
  EXPECT_FALSE(sets.remove(2));
  EXPECT_EQ(sets.find(2), nullptr);
  EXPECT_EQ(sets.next_id(), 3);
}

}  // namespace
}  // namespace ranktime
