// Per-tensor totals, then the top k of each kind (ties by pid, so the tables are stable).
#include "analysis/tensors.h"

#include <algorithm>
#include <string>
#include <vector>

namespace ranktime::timeline::analysis {

TensorStat& TensorsAnalysis::tensor(int64_t pid) { return tensors_.try_emplace(pid).first->second; }

void TensorsAnalysis::add(const Negotiation& n) {
  TensorStat& t = tensor(n.pid);
  const double duration = n.end_us - n.begin_us;
  ++t.negotiations;
  t.wait_total_us += duration;
  t.wait_max_us = std::max(t.wait_max_us, duration);
}

void TensorsAnalysis::add(const RankSlice& slice) {
  if (slice.subphase) return;
  TensorStat& t = tensor(slice.pid);
  const double duration = slice.end_us - slice.begin_us;
  ++t.operations;
  t.processing_total_us += duration;
  t.processing_max_us = std::max(t.processing_max_us, duration);
}

void TensorsAnalysis::finish(Summary& s) {
  // Every tensor named in the file or seen in the window, named by its process (else its pid).
  for (const auto& [pid, info] : pass_.tensors) tensor(pid);
  std::vector<TensorStat> all;
  all.reserve(tensors_.size());
  for (auto& [pid, t] : tensors_) {
    t.pid = pid;
    const Pass::Tensor* info = pass_.tensor(pid);
    t.name = info != nullptr ? info->name : "pid " + std::to_string(pid);
    t.set_ranks = info != nullptr ? info->set_ranks : 0;
    t.lanes = s.rank_lanes;
    all.push_back(t);
  }
  auto top = [&](auto better) {
    std::vector<TensorStat> v = all;
    size_t k = std::min(pass_.options().top_k, v.size());
    std::partial_sort(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end(), better);
    v.resize(k);
    return v;
  };
  s.top_wait = top([](const TensorStat& a, const TensorStat& b) {
    return a.wait_total_us != b.wait_total_us ? a.wait_total_us > b.wait_total_us : a.pid < b.pid;
  });
  s.top_processing = top([](const TensorStat& a, const TensorStat& b) {
    return a.processing_total_us != b.processing_total_us
               ? a.processing_total_us > b.processing_total_us
               : a.pid < b.pid;
  });
  auto drop_empty = [](std::vector<TensorStat>& v, auto empty) {
    v.erase(std::remove_if(v.begin(), v.end(), empty), v.end());
  };
  drop_empty(s.top_wait, [](const TensorStat& t) { return t.negotiations == 0; });
  drop_empty(s.top_processing, [](const TensorStat& t) { return t.operations == 0; });
}

}  // namespace ranktime::timeline::analysis
