// Steps are gathered while their negotiations come, at most kMaxOpenSteps at a time.
#include "analysis/steps.h"

#include <algorithm>

namespace ranktime::timeline::analysis {
namespace {

// Per-step figures keep a row per rank and step; ranks from here up (a corrupt trace's, or a run
// larger than any this tool is for) are left out of them, not of the run's figures.
constexpr int kMaxStepRanks = 4096;

}  // namespace

void StepsAnalysis::add(const Negotiation& n) {
  for (const Tick& tick : n.ticks) {
    tick_ranks_ = std::max(tick_ranks_, static_cast<size_t>(tick.rank) + 1);
  }
  if (n.ticks.size() < 2) return;
  std::vector<Readiness> ready = readiness_of(n.ticks);
  int64_t step = n.occurrence;
  const StepMarks& marks = pass_.options().step_marks;
  if (!marks.empty()) {
    const Readiness* earliest = &ready.front();
    for (const Readiness& x : ready) {
      if (x.ts < earliest->ts) earliest = &x;
    }
    step = marks.step_at(earliest->rank, earliest->ts);
    if (step < 0) return;  // before the first step mark
  }
  add_to_step(step, std::move(ready));
}

void StepsAnalysis::add_to_step(int64_t step, std::vector<Readiness> ready) {
  ready.erase(std::remove_if(ready.begin(), ready.end(),
                             [](const Readiness& x) { return x.rank >= kMaxStepRanks; }),
              ready.end());
  OpenStep& open = open_steps_[step];
  open.waits.add(ready);
  for (const Readiness& x : ready) {
    if (x.rank < 0) continue;
    if (static_cast<size_t>(x.rank) >= open.ready_end.size()) open.ready_end.resize(x.rank + 1, -1);
    open.ready_end[x.rank] = std::max(open.ready_end[x.rank], x.ts);
    if (!open.has_begin || x.ts < open.begin_us) open.begin_us = x.ts;
    open.has_begin = true;
  }
  ++open.negotiations;
  while (open_steps_.size() > kMaxOpenSteps) close_step(open_steps_.begin()->first);
}

void StepsAnalysis::close_step(int64_t step) {
  auto it = open_steps_.find(step);
  if (it == open_steps_.end()) return;
  const OpenStep& open = it->second;
  ClosedStep& closed = closed_steps_[step];
  StepStat& stat = closed.stat;
  const bool fresh = stat.negotiations == 0;
  stat.step = step;
  stat.begin_us = fresh ? open.begin_us : std::min(stat.begin_us, open.begin_us);
  stat.negotiations += open.negotiations;
  const size_t n = std::max<size_t>(open.ready_end.size(), static_cast<size_t>(open.waits.ranks()));
  if (stat.ranks.size() < n) stat.ranks.resize(n);
  if (closed.ready_end.size() < n) closed.ready_end.resize(n, -1);
  for (size_t r = 0; r < n; ++r) {
    const int rank = static_cast<int>(r);
    stat.ranks[r].caused_wait_us += open.waits.caused(rank);
    stat.ranks[r].waited_us += open.waits.waited(rank);
    if (r < open.ready_end.size()) {
      closed.ready_end[r] = std::max(closed.ready_end[r], open.ready_end[r]);
    }
  }
  open_steps_.erase(it);
}

void StepsAnalysis::finish(Summary& s) {
  while (!open_steps_.empty()) close_step(open_steps_.begin()->first);
  const StepMarks& marks = pass_.options().step_marks;
  s.steps_from_marks = !marks.empty();
  // Steps with marks but no negotiation analysed (outside a capture window) still have their
  // start lags; those whose first mark lies outside --from/--to are left out.
  std::map<int64_t, double> mark_begin;  // step -> its first mark
  for (const auto& rank_marks : marks.by_rank) {
    for (const auto& [ts, step] : rank_marks) {
      auto [it, inserted] = mark_begin.try_emplace(step, ts);
      if (!inserted) it->second = std::min(it->second, ts);
    }
  }
  for (const auto& [step, ts] : mark_begin) {
    if (pass_.in_window(ts)) closed_steps_.try_emplace(step);
  }
  const size_t nranks = std::min<size_t>(
      kMaxStepRanks, std::max<size_t>(static_cast<size_t>(std::max(0, s.run.ranks)),
                                      std::max(marks.by_rank.size(), tick_ranks_)));
  for (auto& [step, closed] : closed_steps_) {
    StepStat stat = std::move(closed.stat);
    stat.step = step;
    stat.ranks.resize(nranks);
    closed.ready_end.resize(nranks, -1);
    double first_ready = -1;
    for (size_t r = 0; r < nranks; ++r) {
      const double t = closed.ready_end[r];
      if (t >= 0 && pass_.selected(static_cast<int>(r)) && (first_ready < 0 || t < first_ready)) {
        first_ready = t;
      }
    }
    // Start marks: each rank's mark for this step.
    std::vector<double> start(nranks, -1);
    double first_start = -1;
    for (size_t r = 0; r < std::min(marks.by_rank.size(), nranks); ++r) {
      if (!pass_.selected(static_cast<int>(r))) continue;
      const auto& rank_marks = marks.by_rank[r];
      // A rank's marks are in time order and so in step order.
      auto it = std::lower_bound(rank_marks.begin(), rank_marks.end(), step,
                                 [](const auto& mark, int64_t st) { return mark.second < st; });
      if (it == rank_marks.end() || it->second != step) continue;
      start[r] = it->first;
      if (first_start < 0 || it->first < first_start) first_start = it->first;
    }
    if (first_start >= 0) stat.begin_us = first_start;
    double most = 0;
    for (size_t r = 0; r < nranks; ++r) {
      StepRankStat& x = stat.ranks[r];
      if (!pass_.selected(static_cast<int>(r))) {
        x = StepRankStat();
        continue;
      }
      if (start[r] >= 0) x.start_lag_us = start[r] - first_start;
      if (closed.ready_end[r] >= 0) x.ready_lag_us = closed.ready_end[r] - first_ready;
      stat.waited_us += x.waited_us;
      if (x.caused_wait_us > most) {
        most = x.caused_wait_us;
        stat.last_rank = static_cast<int>(r);
        stat.waited_for_last_us = x.caused_wait_us;
      }
    }
    s.steps.push_back(std::move(stat));
  }
  closed_steps_.clear();
}

}  // namespace ranktime::timeline::analysis
