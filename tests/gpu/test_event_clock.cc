// Mapping CUDA event times to host time: anchor choice, re-anchoring, drift estimation and its
// error bound. Pure maths, no GPU.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/gpu/event_clock.h"

namespace ranktime::gpu {
namespace {

TEST(BestAnchorSample, PicksTheNarrowestWindow) {
  std::vector<AnchorSample> s = {{100, 140}, {200, 205}, {300, 320}};
  EXPECT_EQ(best_anchor_sample(s), 1);
  EXPECT_EQ(s[1].midpoint_ns(), 202);
  EXPECT_EQ(s[1].uncertainty_ns(), 3);
}

TEST(BestAnchorSample, IgnoresMalformedSamples) {
  EXPECT_EQ(best_anchor_sample({}), -1);
  EXPECT_EQ(best_anchor_sample({{10, 5}}), -1);
  EXPECT_EQ(best_anchor_sample({{10, 5}, {20, 30}}), 1);
}

TEST(EventClock, MapsEventsRelativeToTheAnchor) {
  EventClock c;
  EXPECT_FALSE(c.has_anchor());
  EXPECT_TRUE(c.due(0));
  Anchor a = c.add_anchor({1'000'000, 1'000'010}, 0);
  EXPECT_EQ(a.id, 1u);
  EXPECT_EQ(a.host_ns, 1'000'005);
  EXPECT_EQ(c.to_host(a, 0), 1'000'005);
  EXPECT_EQ(c.to_host(a, 2500.0), 1'002'505);
  EXPECT_EQ(c.to_host(a, -5.0), 1'000'000);
  EXPECT_DOUBLE_EQ(c.rate(), 1.0);
}

TEST(EventClock, IsDueAfterTheInterval) {
  EventClockOptions o;
  o.reanchor_interval_ns = 1000;
  EventClock c(o);
  c.add_anchor({0, 10}, 0);
  EXPECT_FALSE(c.due(500));
  EXPECT_TRUE(c.due(1005));
}

// A GPU clock that runs 20 ppm slow against the host: after a long enough baseline the rate is
// estimated, and mapping an event far from its anchor stays within the error bound.
TEST(EventClock, EstimatesDriftAndCorrectsForIt) {
  const double true_rate = 1.0 + 20e-6;  // host ns per GPU ns
  EventClockOptions o;
  o.min_baseline_ns = 200'000'000;
  EventClock c(o);
  double gpu = 0;
  int64_t host0 = 5'000'000'000;
  c.add_anchor({host0 - 2000, host0 + 2000}, 0);  // 2 us windows: realistic
  for (int k = 1; k <= 10; ++k) {
    const double step = 1e9;  // one re-anchor per GPU second
    gpu += step;
    const int64_t truth = host0 + std::llround(true_rate * gpu);
    // Jitter the window's position around the truth by up to 1 us.
    const int64_t jitter = (k % 3 - 1) * 1000;
    c.add_anchor({truth + jitter - 2000, truth + jitter + 2000}, step);
  }
  EXPECT_NEAR(c.drift_ppm(), 20.0, 1.0);
  EXPECT_GT(c.rate_uncertainty(), 0.0);
  EXPECT_LT(c.rate_uncertainty(), 1e-6);
  // Before the rate was known the first re-anchor was off by the drift over 1 s (~20 us).
  EXPECT_LE(c.max_abs_residual_ns(), 25'000);
  EXPECT_LE(std::llabs(c.last_residual_ns()), 3'000);

  // An event 0.8 s after the newest anchor.
  const Anchor a = c.current();
  const double g = 0.8e9;
  const int64_t truth = host0 + std::llround(true_rate * (gpu + g));
  const int64_t mapped = c.to_host(a, g);
  EXPECT_LE(std::llabs(mapped - truth), c.error_bound_ns(a, g));
  EXPECT_LE(std::llabs(mapped - truth), 4'000);
  // Without drift correction the error would have been 16 us.
  EXPECT_GT(std::llabs(a.host_ns + std::llround(g) - truth), 10'000);
}

TEST(EventClock, KeepsRateOneUntilTheBaselineIsLongEnough) {
  EventClockOptions o;
  o.min_baseline_ns = 200'000'000;
  EventClock c(o);
  c.add_anchor({0, 4000}, 0);
  // 5 us of calibration jitter over 10 ms would read as 500 ppm: not trusted.
  c.add_anchor({10'005'000, 10'009'000}, 10'000'000);
  EXPECT_DOUBLE_EQ(c.rate(), 1.0);
}

TEST(EventClock, RejectsImplausibleRates) {
  EventClockOptions o;
  o.min_baseline_ns = 1000;
  EventClock c(o);
  c.add_anchor({0, 10}, 0);
  c.add_anchor({2'000'000, 2'000'010}, 1'000'000);  // host ran twice as fast: broken, not drift
  EXPECT_DOUBLE_EQ(c.rate(), 1.0);
  EXPECT_EQ(c.rejected_rates(), 1u);
}

TEST(EventClock, WindowFollowsAChangingRate) {
  EventClockOptions o;
  o.window = 4;
  o.min_baseline_ns = 1;
  EventClock c(o);
  int64_t host = 0;
  c.add_anchor({host, host}, 0);
  for (int k = 0; k < 4; ++k) {  // 50 ppm
    host += 1'000'050'000;
    c.add_anchor({host, host}, 1e9);
  }
  EXPECT_NEAR(c.drift_ppm(), 50.0, 0.01);
  for (int k = 0; k < 4; ++k) {  // then 10 ppm: only the last 4 anchors count
    host += 1'000'010'000;
    c.add_anchor({host, host}, 1e9);
  }
  EXPECT_NEAR(c.drift_ppm(), 10.0, 0.01);
}

TEST(EventClock, ErrorBoundGrowsWithDistance) {
  EventClock c;
  Anchor a = c.add_anchor({0, 2000}, 0);
  EXPECT_GE(c.error_bound_ns(a, 0), 1000);
  EXPECT_GT(c.error_bound_ns(a, 60e9), c.error_bound_ns(a, 1e6));
}

MarkReading gpu_at(double gpu_ns) {
  MarkReading m;
  m.on_gpu = true;
  m.gpu_ns = gpu_ns;
  return m;
}
MarkReading host_at(int64_t host_ns) {
  MarkReading m;
  m.host_ns = host_ns;
  return m;
}

TEST(PlaceMarks, GpuEventsAtTheirDistanceFromTheFirst) {
  MarkReading lost = gpu_at(0);
  lost.ok = false;
  EXPECT_EQ(place_marks({gpu_at(0), gpu_at(1000), lost, gpu_at(2500)}, 50'000, 1.0, 0, 99'000),
            (std::vector<int64_t>{50'000, 51'000, 99'000, 52'500}));
  EXPECT_EQ(place_marks({gpu_at(0), gpu_at(1'000'000)}, 0, 1.0 + 1e-4, 0, 2'000'000),
            (std::vector<int64_t>{0, 1'000'100}));
  EXPECT_TRUE(place_marks({}, 0, 1.0, 0, 0).empty());
}

// MPI staging: copy to host, MPI on the host clock, copy back, seen complete at 1130 us. An anchor
// 30 us late puts the copy to host after the MPI call began and the copy back after the host saw
// it complete; one 30 us early puts the copy back before the MPI call ended. Each run of GPU
// events moves as a whole, so the copies keep their measured durations.
TEST(PlaceMarks, HostReadingsBoundTheGpuEventsAroundThem) {
  // Truth: copy to host 1000-1020 us, MPI 1025-1100, copy back 1105-1125 (GPU time from 1000).
  const std::vector<MarkReading> staged = {gpu_at(0),          gpu_at(20'000),  host_at(1'025'000),
                                           host_at(1'100'000), gpu_at(105'000), gpu_at(125'000)};
  const int64_t issued = 990'000, seen = 1'130'000;
  EXPECT_EQ(
      place_marks(staged, 1'000'000, 1.0, issued, seen),
      (std::vector<int64_t>{1'000'000, 1'020'000, 1'025'000, 1'100'000, 1'105'000, 1'125'000}));
  EXPECT_EQ(
      place_marks(staged, 1'030'000, 1.0, issued, seen),
      (std::vector<int64_t>{1'005'000, 1'025'000, 1'025'000, 1'100'000, 1'110'000, 1'130'000}));
  EXPECT_EQ(place_marks(staged, 970'000, 1.0, issued, seen),
            (std::vector<int64_t>{990'000, 1'010'000, 1'025'000, 1'100'000, 1'100'000, 1'120'000}));
}

// One NCCL job (no host step): its events stay within [issued, seen].
TEST(PlaceMarks, AJobWithoutHostStepsStaysBetweenItsIssueAndItsCompletion) {
  const std::vector<MarkReading> job = {gpu_at(0), gpu_at(4'000), gpu_at(10'000)};
  EXPECT_EQ(place_marks(job, 500'000, 1.0, 100'000, 200'000),
            (std::vector<int64_t>{190'000, 194'000, 200'000}));
  EXPECT_EQ(place_marks(job, 50'000, 1.0, 100'000, 200'000),
            (std::vector<int64_t>{100'000, 104'000, 110'000}));
}

}  // namespace
}  // namespace ranktime::gpu
