// Tests for inspection/lane_choice.h: whose processing lanes the timeline writes (TIMELINE_RANKS,
// TIMELINE_ALL_RANKS), the start-up check against the job's size, and `slowest:K` choosing again
// from the lateness statistics.
#include "inspection/lane_choice.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/settings.h"

namespace ranktime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Config parse(const std::map<std::string, std::string>& env) {
  return parse_config([&env](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

LaneRanks setting(const std::string& text) {
  return parse({{"TIMELINE_RANKS", text}}).timeline_ranks;
}

// Lateness statistics where rank r was last `last[r]` times in the window.
std::vector<RankLateness> last_counts(const std::vector<uint64_t>& last) {
  std::vector<RankLateness> stats(last.size());
  for (size_t r = 0; r < last.size(); ++r) {
    stats[r].rank = static_cast<int>(r);
    stats[r].window = 200;
    stats[r].window_times_last = last[r];
  }
  return stats;
}

TEST(LaneRanksSetting, AListAlwaysHoldsRankZeroAndReadsBackAsIt) {
  EXPECT_FALSE(setting("").on);
  EXPECT_THAT(setting("0,5,17").ranks, ElementsAre(0, 5, 17));
  EXPECT_THAT(setting("17,5").ranks, ElementsAre(0, 5, 17));
  EXPECT_THAT(setting("0").ranks, ElementsAre(0));
  const Config c = parse({{"TIMELINE_RANKS", "17,5"}});
  std::map<std::string, std::string> described;
  for (const auto& [name, value] : c.describe()) described[name] = value;
  EXPECT_EQ(described["TIMELINE_RANKS"], "17,5");  // as given
  EXPECT_EQ(parse(described).timeline_ranks.ranks, c.timeline_ranks.ranks);
}

TEST(LaneRanksSetting, SlowestTakesACount) {
  const LaneRanks s = setting("slowest:4");
  EXPECT_TRUE(s.on);
  EXPECT_EQ(s.slowest, 4);
  EXPECT_TRUE(s.ranks.empty());
  EXPECT_EQ(s.text, "slowest:4");
}

TEST(LaneRanksSetting, MalformedValuesNameTheVariableAndTheValue) {
  for (const char* bad :
       {"0,x", "slowest:", "slowest:0", "slowest:-1", "slowest:x", "slowest", "slowest:2,3",
        "0,5,5", "0,0", "3,3", ",", "1,", ",1", "-1", "1;2", " 1", "all", "99999999999"}) {
    try {
      parse({{"TIMELINE_RANKS", bad}});
      ADD_FAILURE() << "TIMELINE_RANKS='" << bad << "' was accepted";
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::string("TIMELINE_RANKS='") + bad + "'"));
    }
  }
  try {
    parse({{"TIMELINE_RANKS", "0,5,5"}});
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("each rank once"));
  }
}

TEST(LaneRanksSetting, TimelineAllRanksZeroAsWellIsAnError) {
  try {
    parse({{"TIMELINE_RANKS", "5"}, {"TIMELINE_ALL_RANKS", "0"}});
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("TIMELINE_RANKS='5'"));
    EXPECT_THAT(e.what(), HasSubstr("TIMELINE_ALL_RANKS=0"));
  }
  EXPECT_NO_THROW(parse({{"TIMELINE_RANKS", "5"}, {"TIMELINE_ALL_RANKS", "1"}}));
}

TEST(CheckLaneRanks, RanksTheJobDoesNotHaveAreErrorsNamingTheValue) {
  EXPECT_NO_THROW(check_lane_ranks(setting("0,5,17"), 18));
  EXPECT_NO_THROW(check_lane_ranks(setting("slowest:3"), 4));
  EXPECT_NO_THROW(check_lane_ranks(setting(""), 1));
  try {
    check_lane_ranks(setting("0,5,17"), 16);
    FAIL() << "rank 17 of 16 accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("TIMELINE_RANKS='0,5,17'"));
    EXPECT_THAT(e.what(), HasSubstr("rank 17 is not one of the job's 16 ranks (0 to 15)"));
  }
  try {
    check_lane_ranks(setting("slowest:4"), 4);
    FAIL() << "slowest:4 of 4 ranks accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("TIMELINE_RANKS='slowest:4'"));
    EXPECT_THAT(e.what(), HasSubstr("at most 3 besides rank 0"));
  }
}

TEST(LaneChoice, EveryRankRankZerosOnlyOrAList) {
  const LaneChoice all(setting(""), true, 4);
  EXPECT_TRUE(all.all());
  EXPECT_THAT(all.ranks(), ElementsAre(0, 1, 2, 3));
  const LaneChoice rank0(setting(""), false, 4);
  EXPECT_FALSE(rank0.all());
  EXPECT_THAT(rank0.ranks(), ElementsAre(0));
  EXPECT_FALSE(rank0.wants(1));
  LaneChoice list(setting("3,1"), true, 4);
  EXPECT_FALSE(list.all());
  EXPECT_FALSE(list.follows_lateness());
  EXPECT_THAT(list.ranks(), ElementsAre(0, 1, 3));
  EXPECT_TRUE(list.wants(3));
  EXPECT_FALSE(list.wants(2));
  EXPECT_FALSE(list.update(last_counts({0, 0, 200, 0})));  // a list never changes
  EXPECT_THAT(list.ranks(), ElementsAre(0, 1, 3));
}

TEST(LaneChoice, SlowestStartsWithRankZeroThenTakesTheRanksMostOftenLast) {
  LaneChoice slowest(setting("slowest:2"), true, 6);
  EXPECT_TRUE(slowest.follows_lateness());
  EXPECT_THAT(slowest.ranks(), ElementsAre(0));
  // Rank 0 is always written and never takes one of the K places; a rank never last is not
  // chosen even when places are free.
  EXPECT_TRUE(slowest.update(last_counts({150, 0, 0, 50, 0, 0})));
  EXPECT_THAT(slowest.ranks(), ElementsAre(0, 3));
  EXPECT_TRUE(slowest.update(last_counts({10, 20, 0, 60, 0, 110})));
  EXPECT_THAT(slowest.ranks(), ElementsAre(0, 3, 5));
  EXPECT_TRUE(slowest.wants(5));
  EXPECT_FALSE(slowest.wants(1));
  EXPECT_FALSE(slowest.update(last_counts({10, 20, 0, 60, 0, 110})));  // unchanged
}

TEST(LaneChoice, ATieKeepsTheRankAlreadyChosen) {
  LaneChoice slowest(setting("slowest:1"), true, 4);
  EXPECT_TRUE(slowest.update(last_counts({0, 0, 100, 0})));
  EXPECT_THAT(slowest.ranks(), ElementsAre(0, 2));
  EXPECT_FALSE(slowest.update(last_counts({0, 100, 100, 0})));  // rank 1 ties: rank 2 stays
  EXPECT_TRUE(slowest.update(last_counts({0, 101, 99, 0})));
  EXPECT_THAT(slowest.ranks(), ElementsAre(0, 1));
}

}  // namespace
}  // namespace ranktime
