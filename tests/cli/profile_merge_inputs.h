// `ranktime merge`'s test inputs: anchor events, a torch 1.13 profile and a timeline with known
// clocks, and a fixture that merges them in a directory of its own (test_profile_merge*.cc).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ranktime/timeline/profile_merge.h"
#include "ranktime/timeline/profile_trace.h"
#include "ranktime/timeline/trace_names.h"

namespace ranktime::timeline::test {

using json = nlohmann::json;

constexpr int64_t kZeroNs = 5'000'000'000;  // rank 0's clock at the timeline's ts 0

// Anchor n of `rank` taken at profiler time `profiler_us`, when the rank's clock read `clock_ns`.
inline json anchor_events(int n, double profiler_us, int64_t clock_ns, int rank, int64_t pid = 100,
                          const std::string& host = "h.example") {
  const std::string marker = "ranktime.anchor." + std::to_string(n) + ".ns." +
                             std::to_string(clock_ns) + ".rank." + std::to_string(rank) + ".pid." +
                             std::to_string(pid) + ".host." + host;
  return json::array({{{"name", "ranktime.anchor." + std::to_string(n)},
                       {"ph", "X"},
                       {"ts", profiler_us - 2},
                       {"dur", 4},
                       {"tid", 1},
                       {"pid", "CPU functions"},
                       {"args", json::object()}},
                      {{"name", marker},
                       {"ph", "X"},
                       {"ts", profiler_us + 3},
                       {"dur", 1},
                       {"tid", 1},
                       {"pid", "CPU functions"},
                       {"args", json::object()}}});
}

// A legacy (torch 1.13) profile of `rank`: its profiler started at clock `start_ns` (the rank's
// clock), anchors every 20 ms for 100 ms, and an operator `op` at profiler time 30 ms.
inline json legacy_profile(int rank, int64_t start_ns, const std::string& op = "aten::addmm",
                           int64_t pid = 100) {
  json events = json::array();
  for (int n = 0; n <= 5; ++n) {
    const double us = 20'000.0 * n + 10;
    for (auto& e : anchor_events(n, us, start_ns + static_cast<int64_t>(us * 1000), rank, pid)) {
      events.push_back(e);
    }
  }
  events.push_back({{"name", op},
                    {"ph", "X"},
                    {"ts", 30'000},
                    {"dur", 250},
                    {"tid", 1},
                    {"pid", "CPU functions"},
                    {"args", json::object()}});
  events.push_back({{"name", "aten::mm"},
                    {"ph", "X"},
                    {"ts", 30'010},
                    {"dur", 100},
                    {"tid", 2},
                    {"pid", "CPU functions"},
                    {"args", {{"shape", "[[2, 4]]"}}}});
  return events;
}

inline std::string write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

// A two-rank timeline: rank 1's clock is `offset_us` ahead of rank 0's; steps 0 and 1 on both.
inline std::string timeline_text(double offset_us, const std::string& extra = "") {
  json run = {{"ranks", 2},
              {"hostnames", {"h.example", "h.example"}},
              {"pids", {100, 101}},
              {"clock_offsets_us", {0.0, offset_us}},
              {"clock_uncertainty_us", {0.0, 3.5}},
              {"clock_zero_ns", kZeroNs}};
  json events = json::array({{{"name", "process_name"},
                              {"ph", "M"},
                              {"pid", 0},
                              {"tid", 0},
                              {"args", {{"name", "ranktime"}}}},
                             {{"name", "ranktime_run"},
                              {"ph", "i"},
                              {"s", "g"},
                              {"pid", 0},
                              {"tid", 0},
                              {"ts", 0.0},
                              {"args", run}}});
  for (int r = 0; r < 2; ++r) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", 10 + r},
                      {"args", {{"name", "steps rank " + std::to_string(r)}}}});
    for (int s = 0; s < 2; ++s) {
      events.push_back({{"name", "STEP"},
                        {"ph", "X"},
                        {"pid", 0},
                        {"tid", 10 + r},
                        {"ts", 1000.0 + 50'000 * s},
                        {"dur", 49'000.0},
                        {"args", {{"step", s}}}});
    }
  }
  std::string text = events.dump();
  text.pop_back();  // the closing bracket
  return text + extra + "]\n";
}

class MergeFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("profile_merge_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  MergeResult merge(const std::vector<MergeProfile>& profiles, double offset_us = 40'000,
                    std::optional<std::pair<int64_t, int64_t>> steps = std::nullopt) {
    MergeOptions o;
    o.timeline = write_file(dir_ / "t.json", timeline_text(offset_us));
    o.profiles = profiles;
    o.output = (dir_ / "merged.json").string();
    o.steps = steps;
    return merge_profiles(o);
  }
  json merged() {
    std::ifstream in(dir_ / "merged.json");
    return json::parse(in);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

}  // namespace ranktime::timeline::test
