// The what-if replay of one step (see what_if.h): the measured schedule is turned into a plan
// (each negotiation's completion latency, each batch run's gap and duration, lane by lane), then
// replayed with each scenario's negotiation completions.
#include <algorithm>
#include <limits>

#include "ranktime/timeline/what_if.h"

namespace ranktime::timeline {
namespace {

constexpr double kNever = -std::numeric_limits<double>::infinity();

// A negotiation's readiness as the scenarios need it.
struct NegotiationPlan {
  double last = kNever;    // the last rank's readiness
  int last_rank = -1;      // that rank when it alone was last; -1 on a tie or a single rank
  double second = kNever;  // the latest readiness of the other ranks
  double median = kNever;  // the median of every rank's readiness
  double latency = 0;      // the negotiation's end minus its last readiness
  bool in_run = false;     // some batch holding it ran on a recorded lane
};

struct RunPlan {
  size_t batch = 0;
  double duration = 0;
  // It starts this long after its negotiations are done, and after its lane is free (kNever:
  // it overlapped the lane's previous batch, as device work may). A run that waited for its
  // negotiations has its own latency; one that waited for the lane has the lane's typical
  // latency after a negotiation (at most what it had), since on time it might wait for it.
  double after_negotiations = 0;
  double after_lane = 0;
};

struct LanePlan {
  double busy_until = kNever;  // an earlier step's batch
  std::vector<RunPlan> runs;   // in measured order
};

class Plan {
 public:
  explicit Plan(const WhatIfStep& step) : step_(step) {
    for (const WhatIfNegotiation& n : step.negotiations) negotiations_.push_back(plan(n));
    plan_lanes();
  }

  // The step's last completion when negotiation i completes at done[i].
  double last_completion(const std::vector<double>& done) const {
    double last = kNever;
    for (size_t i = 0; i < done.size(); ++i) {
      if (!negotiations_[i].in_run) last = std::max(last, done[i]);
    }
    std::vector<double> batch_done(step_.batches.size(), kNever);
    for (size_t b = 0; b < step_.batches.size(); ++b) {
      for (size_t i : step_.batches[b].negotiations) {
        if (i < done.size()) batch_done[b] = std::max(batch_done[b], done[i]);
      }
    }
    for (const LanePlan& lane : lanes_) {
      double free = lane.busy_until;
      for (const RunPlan& run : lane.runs) {
        const double start =
            std::max(batch_done[run.batch] + run.after_negotiations, free + run.after_lane);
        const double end = start + run.duration;
        free = std::max(free, end);
        last = std::max(last, end);
      }
    }
    return last;
  }

  std::vector<double> done_unchanged() const {
    std::vector<double> done;
    for (const NegotiationPlan& n : negotiations_) done.push_back(n.last + n.latency);
    return done;
  }
  std::vector<double> done_without(int rank) const {
    std::vector<double> done;
    for (const NegotiationPlan& n : negotiations_) {
      // With the last rank at the median of the others (or its own time, if earlier), the
      // latest readiness is the next latest rank's: that median is no later than it.
      done.push_back((n.last_rank == rank ? n.second : n.last) + n.latency);
    }
    return done;
  }
  std::vector<double> done_nobody_late() const {
    std::vector<double> done;
    for (const NegotiationPlan& n : negotiations_) done.push_back(n.median + n.latency);
    return done;
  }
  // Ranks that were alone last in some negotiation: the only ones whose lateness moves anything.
  std::vector<int> last_ranks() const {
    std::vector<int> ranks;
    for (const NegotiationPlan& n : negotiations_) {
      if (n.last_rank >= 0) ranks.push_back(n.last_rank);
    }
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    return ranks;
  }
  double measured_last_completion() const {
    double last = kNever;
    for (size_t i = 0; i < step_.negotiations.size(); ++i) {
      if (!negotiations_[i].in_run) last = std::max(last, step_.negotiations[i].end_us);
    }
    for (const WhatIfBatch& batch : step_.batches) {
      for (const WhatIfRun& run : batch.runs) last = std::max(last, run.end_us);
    }
    return last;
  }

 private:
  static NegotiationPlan plan(const WhatIfNegotiation& n) {
    NegotiationPlan p;
    std::vector<double> times;
    for (const WhatIfReady& r : n.ready) {
      times.push_back(r.us);
      if (r.us > p.last) {
        p.second = p.last;
        p.last = r.us;
        p.last_rank = r.rank;
      } else {
        p.second = std::max(p.second, r.us);
      }
    }
    if (p.second == p.last || n.ready.size() < 2) p.last_rank = -1;
    if (n.ready.empty()) p.last = n.end_us;
    p.median = n.ready.empty() ? n.end_us : median_of(std::move(times));
    p.latency = n.end_us - p.last;
    return p;
  }

  void plan_lanes() {
    struct Measured {
      const WhatIfRun* run;
      size_t batch;
    };
    std::vector<std::vector<Measured>> by_lane;
    std::vector<int> lane_ids;
    auto lane_index = [&](int lane) {
      auto it = std::find(lane_ids.begin(), lane_ids.end(), lane);
      if (it != lane_ids.end()) return static_cast<size_t>(it - lane_ids.begin());
      lane_ids.push_back(lane);
      by_lane.emplace_back();
      lanes_.emplace_back();
      return lane_ids.size() - 1;
    };
    for (size_t b = 0; b < step_.batches.size(); ++b) {
      const WhatIfBatch& batch = step_.batches[b];
      for (const WhatIfRun& run : batch.runs) by_lane[lane_index(run.lane)].push_back({&run, b});
      if (batch.runs.empty()) continue;
      for (size_t i : batch.negotiations) {
        if (i < negotiations_.size()) negotiations_[i].in_run = true;
      }
    }
    for (const auto& [lane, until] : step_.lanes_busy_until) {
      auto it = std::find(lane_ids.begin(), lane_ids.end(), lane);
      if (it != lane_ids.end())
        lanes_[static_cast<size_t>(it - lane_ids.begin())].busy_until = until;
    }
    for (size_t l = 0; l < by_lane.size(); ++l) {
      std::vector<Measured>& runs = by_lane[l];
      std::stable_sort(runs.begin(), runs.end(), [](const Measured& a, const Measured& b) {
        return a.run->begin_us < b.run->begin_us;
      });
      double free = lanes_[l].busy_until;
      std::vector<double> negotiation_latencies;
      std::vector<bool> waited_for_lane;
      for (const Measured& m : runs) {
        double done = kNever;
        for (size_t i : step_.batches[m.batch].negotiations) {
          if (i < step_.negotiations.size()) done = std::max(done, step_.negotiations[i].end_us);
        }
        const double begin = m.run->begin_us;
        RunPlan p;
        p.batch = m.batch;
        p.duration = m.run->end_us - begin;
        // Runs that began before their negotiations' end (clock uncertainty between lanes) are
        // replayed as starting at it.
        if (done == kNever) done = begin;
        const bool overlapped = begin < free;
        const bool lane_bound = !overlapped && free > done;
        p.after_lane = overlapped ? kNever : lane_bound ? begin - free : 0;
        p.after_negotiations = std::max(0.0, begin - done);
        if (!lane_bound) negotiation_latencies.push_back(p.after_negotiations);
        waited_for_lane.push_back(lane_bound);
        free = std::max(free, m.run->end_us);
        lanes_[l].runs.push_back(p);
      }
      const double typical = median_of(negotiation_latencies);
      for (size_t k = 0; k < runs.size(); ++k) {
        RunPlan& p = lanes_[l].runs[k];
        if (waited_for_lane[k]) p.after_negotiations = std::min(typical, p.after_negotiations);
      }
    }
  }

  const WhatIfStep& step_;
  std::vector<NegotiationPlan> negotiations_;
  std::vector<LanePlan> lanes_;
};

}  // namespace

double median_of(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  const double lower =
      *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

double WhatIfStepResult::saving_of(int rank) const {
  for (const WhatIfRankSaving& s : savings) {
    if (s.rank == rank) return s.saving_us;
  }
  return 0;
}

int WhatIfSummary::costliest_rank() const {
  int rank = -1;
  double most = 0;
  for (const WhatIfRankCost& r : ranks) {
    if (r.saving_us > most) {
      most = r.saving_us;
      rank = r.rank;
    }
  }
  return rank;
}

WhatIfStepResult replay_step(const WhatIfStep& step) {
  WhatIfStepResult result;
  result.measured_us = step.end_us - step.begin_us;
  const Plan plan(step);
  const double measured_last = plan.measured_last_completion();
  const double replayed_last = plan.last_completion(plan.done_unchanged());
  if (measured_last == kNever || replayed_last == kNever) {
    result.replayed_us = result.measured_us;
    return result;
  }
  result.replayed_us = result.measured_us + (replayed_last - measured_last);
  for (int rank : plan.last_ranks()) {
    const double saving = replayed_last - plan.last_completion(plan.done_without(rank));
    if (saving > 0) result.savings.push_back({rank, saving});
  }
  result.nobody_late_saving_us =
      std::max(0.0, replayed_last - plan.last_completion(plan.done_nobody_late()));
  return result;
}

}  // namespace ranktime::timeline
