// PhaseLog's summing of a staged batch's spans (see tensor_entry.h).
#include "core/tensor_entry.h"

namespace ranktime {

void PhaseLog::add_summed(const PhaseLog& stages) {
  if (stages.spans.empty()) return;
  const size_t first = spans.size();
  for (const Span& s : stages.spans) {
    Span* same = nullptr;
    for (size_t i = first; i < spans.size() && !same; ++i) {
      if (spans[i].phase == s.phase) same = &spans[i];
    }
    if (same == nullptr) same = &spans.emplace_back(Span{s.phase, 0, 0});
    same->end_ns += s.end_ns - s.begin_ns;  // a duration until laid out below
  }
  int64_t at = stages.spans.front().begin_ns;
  for (size_t i = first; i < spans.size(); ++i) {
    const int64_t duration = spans[i].end_ns;
    spans[i].begin_ns = at;
    spans[i].end_ns = at += duration;
  }
}

}  // namespace ranktime
