// The summary's numbers on generated traces whose lateness, fusion and bandwidth are known.
#include "ranktime/timeline/trace_analysis.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <sstream>
#include <vector>

#include "trace_text.h"

namespace ranktime::timeline {
namespace {

Summary summarize(const std::string& text, SummaryOptions options = {},
                  TraceReadResult* result = nullptr) {
  TraceSummarizer summarizer(options);
  std::istringstream in(text);
  TraceReadResult r = read_trace(in, [&](const TraceEvent& e) {
    summarizer.add(e);
    return true;
  });
  if (result) *result = r;
  return summarizer.finish();
}

const PhaseStat* find_phase(const Summary& s, const std::string& op, const std::string& phase) {
  for (const auto& p : s.phases) {
    if (p.op == op && p.phase == phase) return &p;
  }
  return nullptr;
}

TEST(LogHistogram, QuantilesWithinOnePercent) {
  std::mt19937 rng(7);
  std::lognormal_distribution<double> dist(8.0, 1.5);
  LogHistogram h;
  std::vector<double> values;
  for (int i = 0; i < 20000; ++i) {
    values.push_back(dist(rng));
    h.add(values.back());
  }
  std::sort(values.begin(), values.end());
  for (double q : {0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0}) {
    double exact = values[static_cast<size_t>(std::ceil(q * values.size())) - 1];
    EXPECT_NEAR(h.quantile(q), exact, exact * 0.01 + 1e-9) << "q=" << q;
  }
  double sum = 0;
  for (double v : values) sum += v;
  EXPECT_NEAR(h.mean(), sum / values.size(), 1e-9 * sum);
  EXPECT_DOUBLE_EQ(h.max(), values.back());
  EXPECT_DOUBLE_EQ(h.min(), values.front());
}

TEST(LogHistogram, ZerosAndEmpty) {
  LogHistogram h;
  EXPECT_EQ(h.quantile(0.5), 0);
  h.add(0);
  h.add(0);
  h.add(100);
  EXPECT_EQ(h.quantile(0.5), 0);
  EXPECT_DOUBLE_EQ(h.quantile(1.0), 100);
  EXPECT_NEAR(h.mean(), 100.0 / 3, 1e-9);
}

TEST(LogHistogram, TightClusterIsReportedExactly) {
  // Values within one bucket: the quantile is their mean, not the bucket's edge or middle.
  LogHistogram h;
  for (int i = 0; i < 100; ++i) h.add(20000.0 + i * 0.5);
  EXPECT_NEAR(h.quantile(0.5), 20024.75, 1e-6);
  EXPECT_LE(h.quantile(0.95), h.max());
  EXPECT_GE(h.quantile(0.05), h.min());
}

TEST(Bandwidth, NcclTestsBusFactors) {
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("ALLREDUCE", 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("ALLGATHER", 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("BROADCAST", 4), 1.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("ALLREDUCE", 1), 0.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("BARRIER", 4), 0.0);
}

class SlowRank : public ::testing::TestWithParam<int> {};

TEST_P(SlowRank, NamesTheSlowRankAndItsLag) {
  testing::SyntheticTrace t;
  t.ranks = 4;
  t.tensors = 6;
  t.steps = 5;
  t.slow_rank = GetParam();
  t.delay_us = 20000;
  Summary s = summarize(testing::synthetic_text(t));
  const uint64_t negotiations = static_cast<uint64_t>(t.tensors * t.steps);
  EXPECT_EQ(s.run.ranks, 4);
  EXPECT_TRUE(s.run.has_run_end);
  EXPECT_EQ(s.negotiations, negotiations);
  EXPECT_EQ(s.slowest_rank, t.slow_rank);
  ASSERT_EQ(s.lateness.size(), 4u);
  for (const auto& r : s.lateness) {
    EXPECT_EQ(r.negotiations, negotiations);
    if (r.rank == t.slow_rank) {
      EXPECT_EQ(r.times_last, negotiations);
      EXPECT_DOUBLE_EQ(r.mean_lag_us, 20000);
      EXPECT_NEAR(r.p50_lag_us, 20000, 100);
      EXPECT_NEAR(r.p95_lag_us, 20000, 100);
      EXPECT_DOUBLE_EQ(r.max_lag_us, 20000);
      // Three other ranks waited, in wall-clock time, from the first tensor's readiness to the
      // last one's (10 µs apart) plus 20 ms, once per step.
      EXPECT_NEAR(r.caused_wait_us, 3 * (50 + 20000.0) * t.steps, 1e-6);
    } else {
      EXPECT_EQ(r.times_last, 0u);
      EXPECT_DOUBLE_EQ(r.mean_lag_us, 0);
      EXPECT_DOUBLE_EQ(r.caused_wait_us, 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, SlowRank, ::testing::Values(0, 1, 3));

TEST(Summary, RankFilterRecomputesLateness) {
  testing::SyntheticTrace t;
  t.ranks = 4;
  t.slow_rank = 2;
  t.delay_us = 5000;
  const std::string text = testing::synthetic_text(t);
  SummaryOptions without_slow;
  without_slow.ranks = {0, 1, 3};
  Summary a = summarize(text, without_slow);
  EXPECT_EQ(a.slowest_rank, -1);
  ASSERT_EQ(a.lateness.size(), 3u);
  for (const auto& r : a.lateness) EXPECT_DOUBLE_EQ(r.mean_lag_us, 0);
  EXPECT_EQ(a.rank_lanes, 3);

  SummaryOptions pair;
  pair.ranks = {1, 2};
  Summary b = summarize(text, pair);
  EXPECT_EQ(b.slowest_rank, 2);
  ASSERT_EQ(b.lateness.size(), 2u);
  EXPECT_NEAR(b.lateness[1].caused_wait_us, (5000.0 + 10 * (t.tensors - 1)) * t.steps, 1e-6);
}

TEST(Summary, ChosenLanesAreTheOnesAveraged) {
  testing::SyntheticTrace t;
  t.ranks = 4;
  t.lane_ranks = {0, 3};
  t.timeline_ranks = "3";
  Summary s = summarize(testing::synthetic_text(t));
  EXPECT_FALSE(s.run.all_ranks);
  EXPECT_EQ(s.run.timeline_ranks, "3");
  EXPECT_EQ(s.rank_lanes, 2);
  EXPECT_EQ(s.lane_ranks, (std::vector<int>{0, 3}));
  ASSERT_EQ(s.lateness.size(), 4u);  // every rank's ticks: lateness for all four
  const PhaseStat* op = find_phase(s, "ALLREDUCE", "ALLREDUCE");
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(op->count, static_cast<uint64_t>(t.tensors * t.steps * 2));
}

TEST(Summary, TimeWindowKeepsWhatBeginsInside) {
  testing::SyntheticTrace t;
  t.steps = 4;
  t.tensors = 3;
  t.step_us = 100000;
  const std::string text = testing::synthetic_text(t);
  SummaryOptions window;
  window.from_us = 1000 + 100000;  // step 1 starts here
  window.to_us = 1000 + 200000 - 1;
  Summary s = summarize(text, window);
  EXPECT_EQ(s.negotiations, 3u);
  const PhaseStat* op = find_phase(s, "ALLREDUCE", "ALLREDUCE");
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(op->count, 3u * t.ranks);
  EXPECT_GE(s.first_ts_us, *window.from_us);
}

TEST(Summary, FusedBatchesCountSharedSlicesOnce) {
  testing::SyntheticTrace t;
  t.ranks = 4;
  t.tensors = 8;
  t.fused = 4;
  t.steps = 3;
  t.bytes = 1 << 20;
  t.collective_us = 500;
  Summary s = summarize(testing::synthetic_text(t));
  const uint64_t batches_per_rank = 2 * 3;
  EXPECT_EQ(s.rank_lanes, 4);
  ASSERT_EQ(s.fusion.size(), 1u);
  const FusionStat& f = s.fusion[0];
  EXPECT_EQ(f.op, "ALLREDUCE");
  EXPECT_EQ(f.batches, batches_per_rank * 4);
  EXPECT_EQ(f.tensors, 8u * 3 * 4);
  EXPECT_EQ(f.max_tensors, 4u);
  EXPECT_EQ(f.bytes, f.tensors * static_cast<uint64_t>(t.bytes));
  EXPECT_EQ(f.max_bytes, 4u * t.bytes);

  const PhaseStat* collective = find_phase(s, "ALLREDUCE", "MPI_ALLREDUCE");
  ASSERT_NE(collective, nullptr);
  EXPECT_EQ(collective->count, batches_per_rank * 4);
  EXPECT_NEAR(collective->total_us, 500.0 * batches_per_rank * 4, 1e-3);
  const PhaseStat* memcpy_in = find_phase(s, "ALLREDUCE", "MEMCPY_IN_FUSION_BUFFER");
  ASSERT_NE(memcpy_in, nullptr);
  EXPECT_EQ(memcpy_in->count, batches_per_rank * 4);
  // Sub-phases are listed in Horovod's order after the operation and its negotiation.
  std::vector<std::string> order;
  for (const auto& p : s.phases) order.push_back(p.phase);
  std::vector<std::string> expected = {
      "NEGOTIATE_ALLREDUCE",     "ALLREDUCE",     "QUEUE",
      "MEMCPY_IN_FUSION_BUFFER", "MPI_ALLREDUCE", "MEMCPY_OUT_FUSION_BUFFER"};
  EXPECT_EQ(order, expected);

  ASSERT_EQ(s.bandwidth.size(), 1u);
  const BandwidthStat& b = s.bandwidth[0];
  EXPECT_EQ(b.batches, batches_per_rank * 4);
  const double algbw = 4.0 * t.bytes / 500e-6 / 1e9;  // GB/s
  EXPECT_NEAR(b.algbw_gbps, algbw, algbw * 1e-9);
  EXPECT_NEAR(b.busbw_gbps, algbw * 1.5, algbw * 1e-9);
}

TEST(Summary, AProcessSetsTensorsGetTheirOwnBandwidthRowWithTheSetsSize) {
  testing::SyntheticTrace t;
  t.ranks = 4;
  t.tensors = 2;
  t.steps = 2;
  t.tensor_names = {"grad.0", "grad.1 [process set 1: ranks 0,1]"};
  Summary s = summarize(testing::synthetic_text(t));
  ASSERT_EQ(s.bandwidth.size(), 2u);
  const double algbw = t.bytes / (t.collective_us * 1e-6) / 1e9;  // GB/s
  for (const BandwidthStat& b : s.bandwidth) {
    EXPECT_EQ(b.op, "ALLREDUCE");
    EXPECT_NEAR(b.algbw_gbps, algbw, algbw * 1e-9);
  }
  const auto job = std::find_if(s.bandwidth.begin(), s.bandwidth.end(),
                                [](const BandwidthStat& b) { return b.ranks == 4; });
  const auto set = std::find_if(s.bandwidth.begin(), s.bandwidth.end(),
                                [](const BandwidthStat& b) { return b.ranks == 2; });
  ASSERT_NE(job, s.bandwidth.end());
  ASSERT_NE(set, s.bandwidth.end());
  EXPECT_DOUBLE_EQ(job->bus_factor, 1.5);  // 2(n-1)/n, n = 4
  EXPECT_DOUBLE_EQ(set->bus_factor, 1.0);  // n = 2: the set's ranks, not the job's
  EXPECT_EQ(job->batches, 2u * 4);
  EXPECT_EQ(set->batches, 2u * 4);
}

TEST(Summary, UnfusedTensorsAreOneBatchEach) {
  testing::SyntheticTrace t;
  t.ranks = 2;
  t.tensors = 5;
  t.steps = 2;
  Summary s = summarize(testing::synthetic_text(t));
  ASSERT_EQ(s.fusion.size(), 1u);
  EXPECT_EQ(s.fusion[0].batches, 5u * 2 * 2);
  EXPECT_EQ(s.fusion[0].max_tensors, 1u);
  EXPECT_EQ(find_phase(s, "ALLREDUCE", "MEMCPY_IN_FUSION_BUFFER"), nullptr);
}

TEST(Summary, TopKTensors) {
  testing::SyntheticTrace t;
  t.tensors = 6;
  t.slow_rank = 1;
  t.delay_us = 1000;
  SummaryOptions options;
  options.top_k = 2;
  Summary s = summarize(testing::synthetic_text(t), options);
  ASSERT_EQ(s.top_wait.size(), 2u);
  ASSERT_EQ(s.top_processing.size(), 2u);
  EXPECT_GE(s.top_wait[0].wait_total_us, s.top_wait[1].wait_total_us);
  EXPECT_EQ(s.top_wait[0].negotiations, static_cast<uint64_t>(t.steps));
  EXPECT_EQ(s.top_wait[0].name.rfind("grad.", 0), 0u);
  // Each negotiation lasts delay + 10 µs in the generated trace.
  EXPECT_NEAR(s.top_wait[0].wait_total_us, 1010.0 * t.steps, 1e-6);
}

TEST(Summary, CycleMarkers) {
  testing::SyntheticTrace t;
  t.tensors = 4;
  t.fused = 2;
  t.steps = 3;
  t.mark_cycles = true;
  Summary s = summarize(testing::synthetic_text(t));
  EXPECT_EQ(s.cycles.cycles, 6u);
  EXPECT_NEAR(s.cycles.batches_per_cycle, 1.0, 1e-9);
  EXPECT_GT(s.cycles.max_interval_us, 0);
}

TEST(Summary, TruncatedTraceStillSummarises) {
  testing::SyntheticTrace t;
  t.ranks = 2;
  t.tensors = 4;
  t.steps = 6;
  t.slow_rank = 1;
  t.delay_us = 3000;
  std::string text = testing::synthetic_text(t);
  text.resize(text.size() * 2 / 3 + 17);
  TraceReadResult r;
  Summary s = summarize(text, {}, &r);
  EXPECT_TRUE(r.truncated);
  EXPECT_GT(s.negotiations, 4u);
  EXPECT_FALSE(s.run.has_run_end);
  EXPECT_EQ(s.slowest_rank, 1);
}

TEST(Summary, NoNegotiationsNoSlowestRank) {
  Summary s = summarize("[]");
  EXPECT_EQ(s.slowest_rank, -1);
  EXPECT_EQ(s.negotiations, 0u);
  EXPECT_TRUE(s.phases.empty());
}

}  // namespace
}  // namespace ranktime::timeline
