// Round-based call numbering; see call_names.h.
#include "call_names.h"

#include <utility>

namespace ranktime::c10d {

CallNames::CallNames(std::string prefix, size_t max_round)
    : prefix_(std::move(prefix)), max_round_(max_round == 0 ? 1 : max_round) {}

CallNames::Next CallNames::next(const std::vector<const void*>& tensors) {
  Next out;
  bool repeated = index_ >= max_round_;
  for (const void* t : tensors) repeated = repeated || round_.count(t) > 0;
  if (repeated) {
    index_ = 0;
    round_.clear();
    out.new_round = true;
  }
  round_.insert(tensors.begin(), tensors.end());
  out.name = prefix_ + std::to_string(index_++);
  return out;
}

}  // namespace ranktime::c10d
