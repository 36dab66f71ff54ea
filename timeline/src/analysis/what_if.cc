// Gathers each step for the what-if replay, at most kMaxOpenSteps at a time (see what_if.h).
#include "analysis/what_if.h"

#include <algorithm>
#include <cmath>

namespace ranktime::timeline::analysis {
namespace {

// Negotiations of a tensor kept to place its operation slices.
constexpr size_t kRecentPerTensor = 4;

}  // namespace

void WhatIfAnalysis::add(const Negotiation& n) {
  if (n.ticks.empty() || n.op == "JOIN") return;
  if (n.end_args != nullptr && n.end_args->is_object() && n.end_args->contains("error")) return;
  const Tick* first = &n.ticks.front();
  for (const Tick& t : n.ticks) {
    if (t.ts < first->ts) first = &t;
  }
  int64_t step = n.occurrence;
  const StepMarks& marks = pass_.options().step_marks;
  if (!marks.empty()) {
    step = marks.step_at(first->rank, first->ts);
    if (step < 0) return;  // before the first step mark
  }
  if (step <= last_closed_ && open_.find(step) == open_.end()) return;  // too late to replay
  OpenStep& open = open_[step];
  WhatIfNegotiation w;
  for (const Tick& t : n.ticks) {
    w.ready.push_back({t.rank, t.ts});
    ranks_ = std::max(ranks_, static_cast<size_t>(t.rank) + 1);
  }
  w.end_us = n.end_us;
  const size_t index = open.step.negotiations.size();
  open.step.negotiations.push_back(std::move(w));
  std::deque<Recent>& recent = recent_[n.pid];
  recent.push_back({first->ts, step, index});
  if (recent.size() > kRecentPerTensor) recent.pop_front();
  while (open_.size() > kMaxOpenSteps) close_step(open_.begin()->first);
}

void WhatIfAnalysis::add(const RankSlice& s) {
  if (s.subphase || s.error || s.op == nullptr) return;
  auto found = recent_.find(s.pid);
  if (found == recent_.end()) return;
  const Recent* owner = nullptr;
  for (const Recent& r : found->second) {
    if (r.begin_us <= s.begin_us) owner = &r;
  }
  if (owner == nullptr) return;
  auto open = open_.find(owner->step);
  if (open == open_.end()) return;
  OpenStep& step = open->second;
  if (s.op->fused_tensors <= 1) {
    add_run(step, s.rank, s.begin_us, s.end_us, {owner->index});
    return;
  }
  auto key = std::make_tuple(s.rank, to_ns(s.begin_us), to_ns(s.end_us));
  auto& [members, expected] = step.pending[key];
  expected = s.op->fused_tensors;
  members.push_back(owner->index);
  if (static_cast<int64_t>(members.size()) < expected) return;
  std::vector<size_t> all = std::move(members);
  step.pending.erase(key);
  add_run(step, s.rank, s.begin_us, s.end_us, std::move(all));
}

void WhatIfAnalysis::add_run(OpenStep& open, int lane, double begin, double end,
                             std::vector<size_t> members) {
  std::sort(members.begin(), members.end());
  auto [it, inserted] = open.batch_of.try_emplace(members.front(), open.step.batches.size());
  if (inserted) {
    WhatIfBatch batch;
    batch.negotiations = std::move(members);
    open.step.batches.push_back(std::move(batch));
  }
  open.step.batches[it->second].runs.push_back({lane, begin, end});
  auto [lane_end, first] = open.lane_end.try_emplace(lane, end);
  if (!first) lane_end->second = std::max(lane_end->second, end);
}

void WhatIfAnalysis::close_step(int64_t step) {
  auto it = open_.find(step);
  if (it == open_.end()) return;
  OpenStep& open = it->second;
  // Batches whose other tensors never came (a window's edge, a cut file) run as they are.
  for (auto& [key, pending] : open.pending) {
    add_run(open, std::get<0>(key), std::get<1>(key) / 1e3, std::get<2>(key) / 1e3,
            std::move(pending.first));
  }
  WhatIfStep& w = open.step;
  if (step == last_closed_ + 1) {
    for (const auto& [lane, end] : last_closed_lane_end_)
      w.lanes_busy_until.emplace_back(lane, end);
  }
  double first_ready = 0, last_completion = 0;
  bool any = false;
  for (const WhatIfNegotiation& n : w.negotiations) {
    for (const WhatIfReady& r : n.ready) {
      first_ready = any ? std::min(first_ready, r.us) : r.us;
      any = true;
    }
    last_completion = std::max(last_completion, n.end_us);
  }
  for (const auto& [lane, end] : open.lane_end) last_completion = std::max(last_completion, end);
  w.begin_us = first_ready;
  w.end_us = last_completion;
  // With step marks: from the step's first mark to the next step's first.
  const StepMarks& marks = pass_.options().step_marks;
  bool first_mark = true;
  double next_mark = -1;
  for (const auto& rank_marks : marks.by_rank) {
    // A rank's marks are in time order, and so in step order.
    auto at = [&](int64_t wanted) {
      auto m = std::lower_bound(rank_marks.begin(), rank_marks.end(), wanted,
                                [](const auto& mark, int64_t st) { return mark.second < st; });
      return m != rank_marks.end() && m->second == wanted ? m->first : -1.0;
    };
    const double mine = at(step), next = at(step + 1);
    if (mine >= 0 && (first_mark || mine < w.begin_us)) {
      w.begin_us = mine;
      first_mark = false;
    }
    if (next >= 0 && (next_mark < 0 || next < next_mark)) next_mark = next;
  }
  if (next_mark >= 0) w.end_us = std::max(next_mark, w.begin_us);
  const WhatIfStepResult r = replay_step(w);
  WhatIfStepRow row;
  row.step = step;
  row.begin_us = w.begin_us;
  row.measured_us = r.measured_us;
  row.replayed_us = r.replayed_us;
  row.savings = r.savings;
  row.nobody_late_saving_us = r.nobody_late_saving_us;
  summary_.steps.push_back(std::move(row));
  last_closed_ = std::max(last_closed_, step);
  last_closed_lane_end_ = std::move(open.lane_end);
  open_.erase(it);
}

void WhatIfAnalysis::finish(Summary& s) {
  while (!open_.empty()) close_step(open_.begin()->first);
  WhatIfSummary& w = summary_;
  std::sort(w.steps.begin(), w.steps.end(),
            [](const WhatIfStepRow& a, const WhatIfStepRow& b) { return a.step < b.step; });
  w.steps_from_marks = !pass_.options().step_marks.empty();
  w.wall_us = s.wall_us;
  std::vector<double> saving(ranks_, 0.0);
  double error = 0;
  for (const WhatIfStepRow& row : w.steps) {
    w.measured_us += row.measured_us;
    w.replayed_us += row.replayed_us;
    const double e = std::abs(row.replayed_us - row.measured_us);
    error += e;
    if (row.measured_us > 0) {
      w.worst_step_error_pct = std::max(w.worst_step_error_pct, 100 * e / row.measured_us);
    }
    w.nobody_late_saving_us += row.nobody_late_saving_us;
    for (const WhatIfRankSaving& x : row.savings) {
      if (static_cast<size_t>(x.rank) < saving.size()) saving[x.rank] += x.saving_us;
    }
  }
  w.replay_error_pct = w.measured_us > 0 ? 100 * error / w.measured_us : 0;
  for (size_t r = 0; r < saving.size(); ++r) {
    w.ranks.push_back(
        {static_cast<int>(r), saving[r], w.wall_us > 0 ? 100 * saving[r] / w.wall_us : 0});
  }
  s.what_if = std::move(summary_);
}

}  // namespace ranktime::timeline::analysis
