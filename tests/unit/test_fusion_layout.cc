// Tests for FusedLayout::copy (core/fusion_layout.h): any byte range of a fused batch's layout,
// beginning and ending inside tensors or on their boundaries, copied into a buffer and back; and
// PhaseLog::add_summed (core/tensor_entry.h), how a batch run in stages is drawn.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <tuple>
#include <vector>

#include "core/fusion_layout.h"

namespace ranktime {
namespace {

// Tensors of 3, 0, 5, 1 and 4 bytes (an empty one among them), each byte unique across the batch.
class FusionLayout : public ::testing::Test {
 protected:
  void SetUp() override {
    data_.clear();
    entries_.clear();
    pointers_.clear();
    uint8_t next = 1;
    for (const int64_t n : {3, 0, 5, 1, 4}) {
      std::vector<uint8_t>& data = data_.emplace_back(static_cast<size_t>(n));
      for (uint8_t& b : data) b = next++;
    }
    for (std::vector<uint8_t>& data : data_) {
      TensorEntry& e = entries_.emplace_back();
      e.view = {data.data(), DataType::kUInt8, {static_cast<int64_t>(data.size())}};
    }
    for (TensorEntry& e : entries_) pointers_.push_back(&e);
  }

  // The batch's bytes back to back, as the tensors hold them now.
  std::vector<uint8_t> layout() const {
    std::vector<uint8_t> all;
    for (const std::vector<uint8_t>& data : data_) all.insert(all.end(), data.begin(), data.end());
    return all;
  }

  std::vector<std::vector<uint8_t>> data_;
  std::vector<TensorEntry> entries_;
  std::vector<TensorEntry*> pointers_;
};

TEST_F(FusionLayout, FusedBytesIsTheSumOfTheTensors) {
  EXPECT_EQ(fused_bytes(pointers_), 13u);
  EXPECT_EQ(FusedLayout(pointers_).bytes(), 13u);
}

TEST_F(FusionLayout, EveryRangeCopiesInExactlyItsBytes) {
  const std::vector<uint8_t> all = layout();
  for (size_t begin = 0; begin <= all.size(); ++begin) {
    for (size_t end = begin; end <= all.size(); ++end) {
      std::vector<uint8_t> buffer(end - begin + 1, 0xEE);  // one guard byte after the range
      FusedLayout(pointers_).copy(begin, end, buffer.data(), FusionCopy::kIn);
      const std::vector<uint8_t> want(all.begin() + static_cast<long>(begin),
                                      all.begin() + static_cast<long>(end));
      EXPECT_EQ(std::vector<uint8_t>(buffer.begin(), buffer.end() - 1), want)
          << "[" << begin << ", " << end << ")";
      EXPECT_EQ(buffer.back(), 0xEE) << "[" << begin << ", " << end << ") wrote past its end";
    }
  }
}

TEST_F(FusionLayout, EveryRangeCopiesOutExactlyItsBytes) {
  const std::vector<uint8_t> before = layout();
  for (size_t begin = 0; begin <= before.size(); ++begin) {
    for (size_t end = begin; end <= before.size(); ++end) {
      SetUp();  // fresh tensors for each range
      std::vector<uint8_t> buffer(end - begin);
      std::iota(buffer.begin(), buffer.end(), uint8_t{100});
      FusedLayout(pointers_).copy(begin, end, buffer.data(), FusionCopy::kOut);
      std::vector<uint8_t> want = before;
      std::copy(buffer.begin(), buffer.end(), want.begin() + static_cast<long>(begin));
      EXPECT_EQ(layout(), want) << "[" << begin << ", " << end << ")";
    }
  }
}

TEST_F(FusionLayout, StagesOfAnySizeRebuildTheWholeLayout) {
  const std::vector<uint8_t> all = layout();
  for (size_t stage = 1; stage <= all.size() + 1; ++stage) {
    std::vector<uint8_t> joined;
    std::vector<uint8_t> buffer(stage);
    for (size_t begin = 0; begin < all.size(); begin += stage) {
      const size_t end = std::min(all.size(), begin + stage);
      FusedLayout(pointers_).copy(begin, end, buffer.data(), FusionCopy::kIn);
      joined.insert(joined.end(), buffer.begin(), buffer.begin() + static_cast<long>(end - begin));
    }
    EXPECT_EQ(joined, all) << "stages of " << stage << " bytes";
  }
}

using timeline::Phase;

std::vector<std::tuple<Phase, int64_t, int64_t>> spans_of(const PhaseLog& log) {
  std::vector<std::tuple<Phase, int64_t, int64_t>> out;
  for (const PhaseLog::Span& s : log.spans) out.emplace_back(s.phase, s.begin_ns, s.end_ns);
  return out;
}

TEST(PhaseLogSummed, EachPhaseOnceAsLongAsItsStagesBackToBackFromTheFirstStart) {
  PhaseLog stages;
  // Two host-aware stages, with gaps between the spans.
  stages.add(Phase::kMemcpyInFusionBuffer, 100, 102);
  stages.add(Phase::kMpiReduce, 103, 106);
  stages.add(Phase::kMpiBcast, 106, 110);
  stages.add(Phase::kMemcpyOutFusionBuffer, 111, 112);
  stages.add(Phase::kMemcpyInFusionBuffer, 112, 115);
  stages.add(Phase::kMpiReduce, 115, 116);
  stages.add(Phase::kMpiBcast, 116, 120);
  stages.add(Phase::kMemcpyOutFusionBuffer, 121, 123);
  PhaseLog log;
  log.add(Phase::kQueue, 10, 100);  // what the log held before stays
  log.add_summed(stages);
  EXPECT_EQ(spans_of(log), (std::vector<std::tuple<Phase, int64_t, int64_t>>{
                               {Phase::kQueue, 10, 100},
                               {Phase::kMemcpyInFusionBuffer, 100, 105},
                               {Phase::kMpiReduce, 105, 109},
                               {Phase::kMpiBcast, 109, 117},
                               {Phase::kMemcpyOutFusionBuffer, 117, 120}}));
}

TEST(PhaseLogSummed, OneStageKeepsItsDurationsAndNoStagesAddNothing) {
  PhaseLog stages, log;
  log.add_summed(stages);
  EXPECT_TRUE(log.spans.empty());
  stages.add(Phase::kMemcpyInFusionBuffer, 5, 7);
  stages.add(Phase::kMpiAllreduce, 7, 17);
  log.add_summed(stages);
  EXPECT_EQ(spans_of(log),
            (std::vector<std::tuple<Phase, int64_t, int64_t>>{{Phase::kMemcpyInFusionBuffer, 5, 7},
                                                              {Phase::kMpiAllreduce, 7, 17}}));
}

}  // namespace
}  // namespace ranktime
