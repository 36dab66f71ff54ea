// Tests for TimelineRecorder (recording/timeline_recorder.h), without MPI: the records it makes
// from negotiations and executed responses, written by rank 0's real TraceWriter and read back
// as JSON. Readiness ticks sit at each rank's readiness on rank 0's clock with their lag, inside
// their slice; another rank's fused batch travels as one record per tensor and comes out as
// every tensor's full lane, shifted onto rank 0's clock.
#include "recording/timeline_recorder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ranktime {
namespace {

using nlohmann::json;

constexpr int64_t kMs = 1'000'000;

class RecorderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ranktime_recorder_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Rank 0's recorder writing to a file whose timestamps are nanoseconds / 1000 (start_ns 0).
  std::unique_ptr<TimelineRecorder> rank0(int size) {
    auto recorder = std::make_unique<TimelineRecorder>(0, size);
    timeline::RunMetadata metadata;
    metadata.ranks = size;
    metadata.hostnames.assign(size, "h");
    metadata.pids.assign(size, 1);
    EXPECT_TRUE(recorder->start(path(), false, metadata).ok());
    return recorder;
  }

  // Every event of the closed file on (pid, tid), in file order.
  json events(int pid, int tid) {
    std::ifstream in(path());
    json all = json::parse(in);
    json out = json::array();
    for (const json& e : all) {
      if (e["ph"] != "M" && e["pid"] == pid && e["tid"] == tid) out.push_back(e);
    }
    return out;
  }

  std::string path() const { return (dir_ / "t.json").string(); }

  std::filesystem::path dir_;
};

// (name, ph, ts) of each event, for compact comparisons.
std::vector<std::tuple<std::string, std::string, double>> shape_of(const json& events) {
  std::vector<std::tuple<std::string, std::string, double>> out;
  for (const json& e : events) out.emplace_back(e["name"], e["ph"], e["ts"].get<double>());
  return out;
}

using Shape = std::vector<std::tuple<std::string, std::string, double>>;

// What the writer leaves implicit (docs/timeline-format.md): a tick's rank is its name, its
// lag_us its ts minus its slice's unless given.
int tick_rank(const json& tick) { return std::stoi(tick["name"].get<std::string>()); }
double lag_us(const json& tick, const json& slice) {
  if (tick.contains("args") && tick["args"].contains("lag_us")) return tick["args"]["lag_us"];
  return tick["ts"].get<double>() - slice["ts"].get<double>();
}
double end_us(const json& slice) { return slice["ts"].get<double>() + slice["dur"].get<double>(); }

TEST_F(RecorderTest, TicksSitAtEachRanksReadinessInOrderWithTheirLags) {
  auto recorder = rank0(3);
  const uint32_t w = recorder->tensor_ids().id_of("w");
  recorder->negotiations({{w, OpType::kAllreduce, {1 * kMs, 3 * kMs, 2 * kMs}, ""}}, 4 * kMs);
  recorder->stop();
  const json lane = events(1 + static_cast<int>(w), 0);
  EXPECT_EQ(shape_of(lane), (Shape{{"NEGOTIATE_ALLREDUCE", "X", 1000},
                                   {"0", "X", 1000},
                                   {"2", "X", 2000},
                                   {"1", "X", 3000}}));
  ASSERT_EQ(lane.size(), 4u);
  EXPECT_EQ(end_us(lane[0]), 4000);
  EXPECT_EQ(lag_us(lane[1], lane[0]), 0);
  EXPECT_EQ(lag_us(lane[2], lane[0]), 1000);
  EXPECT_EQ(tick_rank(lane[3]), 1);
  EXPECT_EQ(lag_us(lane[3], lane[0]), 2000);
  EXPECT_EQ(lane[0]["args"]["last_rank"], 1);
  EXPECT_EQ(lane[0]["args"]["spread_us"], 2000);
}

TEST_F(RecorderTest, ASliceStartsWhereTheTensorsPreviousOneEndedTicksKeepTheirTrueLag) {
  auto recorder = rank0(2);
  const uint32_t w = recorder->tensor_ids().id_of("w");
  recorder->negotiations({{w, OpType::kBroadcast, {1 * kMs, 2 * kMs}, ""}}, 4 * kMs);
  // Rank 0 was ready again before the first negotiation was known complete (clock uncertainty).
  recorder->negotiations({{w, OpType::kBroadcast, {3 * kMs, 5 * kMs}, ""}}, 6 * kMs);
  recorder->stop();
  const json lane = events(1 + static_cast<int>(w), 0);
  ASSERT_EQ(lane.size(), 6u);
  EXPECT_EQ(shape_of(lane).at(3),
            (std::tuple<std::string, std::string, double>{"NEGOTIATE_BROADCAST", "X", 4000}));
  EXPECT_EQ(lane[4]["ts"], 4000);  // clamped into its slice ...
  EXPECT_EQ(lag_us(lane[4], lane[3]), 0);
  EXPECT_EQ(lane[5]["ts"], 5000);
  EXPECT_EQ(lag_us(lane[5], lane[3]), 2000);  // ... the lag is still from the true readiness
}

TEST_F(RecorderTest, ManyRanksTakeTheLongFormAndATickAfterTheEndIsClampedToIt) {
  constexpr int kRanks = timeline::kMaxInlineTicks + 4;
  auto recorder = rank0(kRanks);
  const uint32_t w = recorder->tensor_ids().id_of("w");
  std::vector<int64_t> ready;
  for (int r = 0; r < kRanks; ++r) ready.push_back((kRanks - r) * kMs);  // the last rank first
  recorder->negotiations({{w, OpType::kAllgather, ready, ""}}, kRanks * kMs - kMs / 2);
  recorder->stop();
  const json lane = events(1 + static_cast<int>(w), 0);
  ASSERT_EQ(lane.size(), size_t{kRanks + 1});
  EXPECT_EQ(lane.front()["name"], "NEGOTIATE_ALLGATHER");
  for (int k = 0; k < kRanks; ++k) {
    const json& tick = lane[1 + k];
    EXPECT_EQ(tick_rank(tick), kRanks - 1 - k);
    EXPECT_EQ(lag_us(tick, lane[0]), k * 1000);
  }
  // Rank 0, ready after the end was known: at the end (just before it: Perfetto takes a slice's
  // end as outside it).
  EXPECT_NEAR(lane[kRanks]["ts"].get<double>(), end_us(lane[0]), 0.01);
  EXPECT_LE(lane[kRanks]["ts"].get<double>(), end_us(lane[0]));
  EXPECT_EQ(lane.front()["args"]["last_rank"], 0);
  EXPECT_EQ(lane.front()["args"]["spread_us"], (kRanks - 1) * 1000);
}

TEST_F(RecorderTest, AnotherRanksFusedBatchBecomesEveryTensorsLaneOnRankZerosClock) {
  auto recorder = rank0(2);
  TimelineRecorder rank1(1, 2);
  ASSERT_TRUE(rank1.start("", false, {}).ok());

  Response response;
  response.op = OpType::kAllreduce;
  std::vector<TensorEntry> tensors(3);
  std::vector<TensorEntry*> entries;
  std::vector<float> data(9);
  int64_t offset = 0;
  for (int i = 0; i < 3; ++i) {
    const std::string name = "t" + std::to_string(i);
    response.names.push_back(name);
    response.tensor_ids.push_back(recorder->tensor_ids().id_of(name));  // rank 0's ids
    tensors[i].view = {data.data() + offset, DataType::kFloat32, {2 + i}};
    offset += 2 + i;
    entries.push_back(&tensors[i]);
  }
  PhaseLog log;
  log.add(timeline::Phase::kMemcpyInFusionBuffer, 11 * kMs, 12 * kMs);
  log.add(timeline::Phase::kMpiAllreduce, 12 * kMs, 14 * kMs);
  log.add(timeline::Phase::kMemcpyOutFusionBuffer, 14 * kMs, 15 * kMs);
  rank1.processed(response, entries, 10 * kMs, 11 * kMs, 15 * kMs, log, Status::Ok());
  std::vector<timeline::Record> shipped = rank1.take_outbox();
  EXPECT_EQ(shipped.size(), 1u + 3u + 3u);  // header, sub-phases, one record per tensor

  // Rank 1's clock is 5 ms ahead of rank 0's.
  OffsetEstimator offset_of_rank1;
  ASSERT_TRUE(offset_of_rank1.add({0, 5 * kMs, 5 * kMs, 0}));
  recorder->ingest(&shipped, offset_of_rank1, 1);
  recorder->stop();

  for (int i = 0; i < 3; ++i) {
    const json lane = events(1 + static_cast<int>(response.tensor_ids[i]), 2);
    // The batch's sub-phases once, in its first tensor's slice (the file's first of them).
    const Shape whole{{"ALLREDUCE", "X", 5000},
                      {"QUEUE", "X", 5000},
                      {"MEMCPY_IN_FUSION_BUFFER", "X", 6000},
                      {"MPI_ALLREDUCE", "X", 7000},
                      {"MEMCPY_OUT_FUSION_BUFFER", "X", 9000}};
    EXPECT_EQ(shape_of(lane), i == 0 ? whole : Shape{whole[0]}) << "tensor " << i;
    ASSERT_FALSE(lane.empty());
    EXPECT_EQ(end_us(lane[0]), 10000);
    if (i == 0) {
      EXPECT_EQ(end_us(lane[1]), 6000);
      EXPECT_EQ(end_us(lane[3]), 9000);
      EXPECT_EQ(end_us(lane[4]), 10000);
    }
    EXPECT_EQ(lane[0]["args"]["fused_tensors"], 3);
    EXPECT_EQ(lane[0]["args"]["shape"], json::array({2 + i}));
    EXPECT_EQ(lane[0]["args"]["bytes"], (2 + i) * 4);
  }
}

TEST_F(RecorderTest, OnlyRankZeroWritesOtherRanksKeepABoundedOutbox) {
  TimelineRecorder rank1(1, 2);
  EXPECT_EQ(rank1.outbox_size(), 0u);
  rank1.cycle(1, 1 * kMs);  // not recording yet
  ASSERT_TRUE(rank1.start("", true, {}).ok());
  rank1.cycle(2, 2 * kMs);
  EXPECT_EQ(rank1.outbox_size(), 1u);
  EXPECT_EQ(rank1.outbox_oldest_ns(), 2 * kMs);
  rank1.instant("STALL", "only rank 0 inspects", 3 * kMs);
  EXPECT_EQ(rank1.outbox_size(), 1u);
  EXPECT_EQ(rank1.take_outbox().size(), 1u);
  EXPECT_EQ(rank1.outbox_size(), 0u);
}

}  // namespace
}  // namespace ranktime
