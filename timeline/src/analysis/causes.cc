// Causes: which region made a late rank late, step by step (causes.h says how).
#include "ranktime/timeline/causes.h"

#include <algorithm>
#include <cstddef>
#include <utility>

#include "ranktime/timeline/what_if.h"  // median_of

namespace ranktime::timeline {
namespace {

// Closed regions kept for a parent that may still close around them. A parent around more than
// this many regions (an epoch's) spans step marks and is left out of the comparison anyway.
constexpr size_t kMaxNestedRegions = 4096;

}  // namespace

std::vector<LateRankStep> compare_step(const StepRegionTimes& step, const CauseOptions& options) {
  const size_t n = std::min(step.ready_end.size(), step.own_us.size());
  auto has_ready = [&](size_t r) { return step.ready_end[r] >= 0; };
  auto has_regions = [&](size_t r) { return !step.own_us[r].empty(); };
  std::vector<LateRankStep> late;
  for (size_t q = 0; q < n; ++q) {
    if (!has_ready(q) || !has_regions(q)) continue;
    std::vector<double> others_ready;
    std::vector<size_t> others_with_regions;
    for (size_t r = 0; r < n; ++r) {
      if (r == q) continue;
      if (has_ready(r)) others_ready.push_back(step.ready_end[r]);
      if (has_regions(r)) others_with_regions.push_back(r);
    }
    if (others_ready.empty() || others_with_regions.empty()) continue;
    const double lateness = step.ready_end[q] - median_of(others_ready);
    if (lateness < options.late_threshold_us) continue;
    LateRankStep row;
    row.step = step.step;
    row.rank = static_cast<int>(q);
    row.lateness_us = lateness;
    // Every region any compared rank had: one the late rank lacks took it no time.
    std::map<std::string, double> regions = step.own_us[q];
    for (size_t r : others_with_regions) {
      for (const auto& entry : step.own_us[r]) regions.try_emplace(entry.first, 0.0);
    }
    for (const auto& [region, own] : regions) {
      std::vector<double> others;
      others.reserve(others_with_regions.size());
      for (size_t r : others_with_regions) {
        auto it = step.own_us[r].find(region);
        others.push_back(it == step.own_us[r].end() ? 0.0 : it->second);
      }
      RegionExcess x;
      x.region = region;
      x.own_us = own;
      x.others_median_us = median_of(std::move(others));
      x.excess_us = own - x.others_median_us;
      row.regions.push_back(std::move(x));
    }
    std::stable_sort(
        row.regions.begin(), row.regions.end(),
        [](const RegionExcess& a, const RegionExcess& b) { return a.excess_us > b.excess_us; });
    late.push_back(std::move(row));
  }
  return late;
}

void CauseTally::add(const std::vector<int>& compared, std::vector<LateRankStep> late) {
  if (compared.size() >= 2) ++causes_.compared_steps;
  for (int rank : compared) ++compared_[rank];
  for (LateRankStep& row : late) {
    auto& [steps, lateness] = late_[row.rank];
    ++steps;
    lateness += row.lateness_us;
    for (const RegionExcess& x : row.regions) {
      Sum& sum = sums_[{row.rank, x.region}];
      ++sum.steps;
      sum.excess_us += x.excess_us;
    }
    causes_.steps.push_back(std::move(row));
  }
}

Causes CauseTally::finish() {
  Causes out = std::move(causes_);
  for (const auto& [key, sum] : sums_) {
    const auto& [steps, lateness] = late_[key.first];
    Cause c;
    c.rank = key.first;
    c.region = key.second;
    c.steps = steps;
    c.compared_steps = compared_[key.first];
    c.lateness_us = lateness / static_cast<double>(steps);
    // Mean over all the rank's late steps: a step without the region added no excess.
    c.excess_us = sum.excess_us / static_cast<double>(steps);
    c.total_excess_us = sum.excess_us;
    c.explained_pct = lateness > 0 ? 100.0 * sum.excess_us / lateness : 0;
    out.causes.push_back(std::move(c));
  }
  // sums_ is ordered by (rank, region), so a stable sort breaks ties that way.
  std::stable_sort(out.causes.begin(), out.causes.end(), [](const Cause& a, const Cause& b) {
    return a.total_excess_us > b.total_excess_us;
  });
  std::stable_sort(out.steps.begin(), out.steps.end(),
                   [](const LateRankStep& a, const LateRankStep& b) {
                     return a.step != b.step ? a.step < b.step : a.rank < b.rank;
                   });
  sums_.clear();
  late_.clear();
  compared_.clear();
  causes_ = Causes();
  return out;
}

double RegionNesting::close(double begin_us, double end_us, double blocked_us) {
  const double own = std::max(0.0, end_us - begin_us - std::max(0.0, blocked_us));
  // Its nested regions closed before it and after it began: the newest entries.
  double nested = 0;
  while (!closed_.empty() && closed_.back().begin_us >= begin_us) {
    nested += closed_.back().own_us;
    closed_.pop_back();
  }
  if (closed_.size() >= kMaxNestedRegions) {
    closed_.erase(closed_.begin(),
                  closed_.begin() + static_cast<std::ptrdiff_t>(kMaxNestedRegions / 4));
  }
  closed_.push_back({begin_us, own});
  return std::max(0.0, own - nested);
}

CauseCollector::CauseCollector(CauseOptions options, StepAt step_at)
    : options_(options), step_at_(std::move(step_at)) {}

StepRegionTimes* CauseCollector::open(int64_t step, int rank) {
  if (step <= closed_through_) return nullptr;
  auto [it, inserted] = open_.try_emplace(step);
  StepRegionTimes& t = it->second;
  if (inserted) {
    t.step = step;
    close_until(step - kOpenSteps);
  }
  if (t.own_us.size() <= static_cast<size_t>(rank)) t.own_us.resize(rank + 1);
  if (t.ready_end.size() <= static_cast<size_t>(rank)) t.ready_end.resize(rank + 1, -1);
  return &t;
}

void CauseCollector::close_until(int64_t step) {
  while (!open_.empty() && open_.begin()->first <= step) close(open_.begin());
  closed_through_ = std::max(closed_through_, step);
}

void CauseCollector::close(std::map<int64_t, StepRegionTimes>::iterator it) {
  const StepRegionTimes& times = it->second;
  std::vector<int> compared;
  const size_t n = std::min(times.ready_end.size(), times.own_us.size());
  for (size_t r = 0; r < n; ++r) {
    if (times.ready_end[r] >= 0 && !times.own_us[r].empty())
      compared.push_back(static_cast<int>(r));
  }
  std::vector<LateRankStep> late = compare_step(times, options_);
  std::vector<int> late_ranks;
  for (const LateRankStep& row : late) late_ranks.push_back(row.rank);
  operators_.close_step(times.step, late_ranks);
  tally_.add(compared, std::move(late));
  open_.erase(it);
}

void CauseCollector::add_region(int rank, std::string_view name, double begin_us, double end_us,
                                double blocked_us) {
  if (rank < 0 || rank >= kMaxRanks) return;
  has_regions_ = true;
  if (static_cast<size_t>(rank) >= nesting_.size()) nesting_.resize(rank + 1);
  const double own = nesting_[rank].close(begin_us, end_us, blocked_us);
  const int64_t step = step_at_(rank, begin_us);
  // A region over more than one step mark (an epoch, the whole loop) is no step's phase.
  StepRegionTimes* t = step >= 0 && step_at_(rank, end_us) <= step + 1 ? open(step, rank) : nullptr;
  if (t == nullptr) {
    ++left_out_;
    return;
  }
  t->own_us[rank][std::string(name)] += own;
  operators_.add_region(rank, step, name, begin_us, end_us);
}

void CauseCollector::add_operator(int rank, std::string_view name, double begin_us, double own_us) {
  operators_.add_operator(rank, step_at_(rank, begin_us), name, begin_us, own_us);
}

void CauseCollector::add_readiness(int64_t step, int rank, double ts_us) {
  if (rank < 0 || rank >= kMaxRanks || step < 0) return;
  StepRegionTimes* t = open(step, rank);
  if (t != nullptr) t->ready_end[rank] = std::max(t->ready_end[rank], ts_us);
}

Causes CauseCollector::finish() {
  while (!open_.empty()) close(open_.begin());
  Causes out = tally_.finish();
  operators_.finish(&out.causes);
  out.has_regions = has_regions_;
  out.regions_left_out = left_out_;
  return out;
}

}  // namespace ranktime::timeline
