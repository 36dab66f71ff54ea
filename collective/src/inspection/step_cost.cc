// Live what-if cost per step (see step_cost.h).
#include "inspection/step_cost.h"

#include <algorithm>

namespace ranktime {
namespace {

// Steps still taking negotiations: a step is replayed once the step two after it began.
constexpr int64_t kOpenSteps = 2;

double to_us(int64_t ns) { return static_cast<double>(ns) / 1e3; }

}  // namespace

StepCost::StepCost(int size, size_t window) : size_(size), window_(window), total_us_(size, 0) {}

void StepCost::add(uint32_t tensor_id, const std::vector<int64_t>& ready_ns,
                   const std::vector<int>& ranks, int joined, int64_t done_ns) {
  const size_t n = ready_ns.size() - static_cast<size_t>(std::max(0, joined));
  const int64_t step = occurrences_[tensor_id]++;
  pending_.erase(tensor_id);
  // A single rank, or a step already replayed (a tensor negotiated more often than the others).
  if (n < 2 || (open_.count(step) == 0 && step + kOpenSteps <= newest_)) return;
  timeline::WhatIfNegotiation w;
  for (size_t i = 0; i < n; ++i) {
    const int r = ranks.empty() ? static_cast<int>(i) : ranks[i];
    w.ready.push_back({r, to_us(ready_ns[i])});
    w.end_us = i == 0 ? w.ready.back().us : std::max(w.end_us, w.ready.back().us);
  }
  w.end_us = std::max(w.end_us, to_us(done_ns));
  std::vector<timeline::WhatIfNegotiation>& negotiations = open_[step].negotiations;
  pending_[tensor_id] = {step, negotiations.size()};
  negotiations.push_back(std::move(w));
  newest_ = std::max(newest_, step);
  while (!open_.empty() && open_.begin()->first + kOpenSteps <= newest_) {
    close(open_.begin()->first);
  }
}

void StepCost::executed(const std::vector<uint32_t>& tensor_ids, int64_t begin_ns, int64_t end_ns) {
  timeline::WhatIfBatch batch;
  timeline::WhatIfStep* step = nullptr;
  int64_t step_number = -1;
  for (uint32_t id : tensor_ids) {
    auto it = pending_.find(id);
    if (it == pending_.end()) continue;
    const Pending p = it->second;
    pending_.erase(it);
    if (step == nullptr) {
      auto open = open_.find(p.step);
      if (open == open_.end()) continue;  // replayed already
      step = &open->second;
      step_number = p.step;
    }
    if (p.step == step_number) batch.negotiations.push_back(p.index);
  }
  const double lane_free = lane_free_us_;
  lane_free_us_ = std::max(lane_free_us_, to_us(end_ns));
  if (step == nullptr) return;
  // The lane as the step's first batch found it (the same in every replay).
  if (step->batches.empty()) step->lanes_busy_until = {{0, lane_free}};
  batch.runs.push_back({0, to_us(begin_ns), to_us(end_ns)});
  step->batches.push_back(std::move(batch));
}

void StepCost::close(int64_t step) {
  auto it = open_.find(step);
  timeline::WhatIfStep& w = it->second;
  // The step as rank 0 sees it: its first readiness to its last completion.
  bool first = true;
  for (const timeline::WhatIfNegotiation& n : w.negotiations) {
    for (const timeline::WhatIfReady& r : n.ready) {
      w.begin_us = first ? r.us : std::min(w.begin_us, r.us);
      first = false;
    }
    w.end_us = std::max(w.end_us, n.end_us);
  }
  for (const timeline::WhatIfBatch& b : w.batches) {
    for (const timeline::WhatIfRun& r : b.runs) w.end_us = std::max(w.end_us, r.end_us);
  }
  due_.push_back(std::move(w));
  open_.erase(it);
}

void StepCost::replay_due() {
  for (const timeline::WhatIfStep& w : due_) {
    timeline::WhatIfStepResult result = timeline::replay_step(w);
    for (const timeline::WhatIfRankSaving& s : result.savings) {
      if (s.rank >= 0 && s.rank < size_) total_us_[s.rank] += s.saving_us;
    }
    recent_.push_back(std::move(result.savings));
    if (recent_.size() > window_) recent_.pop_front();
    ++steps_;
  }
  due_.clear();
}

std::vector<StepCost::RankCost> StepCost::costs() {
  replay_due();
  std::vector<RankCost> out(size_);
  for (int r = 0; r < size_; ++r) out[r].total_us = total_us_[r];
  if (recent_.empty()) return out;
  for (const auto& savings : recent_) {
    for (const timeline::WhatIfRankSaving& s : savings) {
      if (s.rank >= 0 && s.rank < size_) out[s.rank].per_step_us += s.saving_us;
    }
  }
  for (RankCost& c : out) c.per_step_us /= static_cast<double>(recent_.size());
  return out;
}

}  // namespace ranktime
