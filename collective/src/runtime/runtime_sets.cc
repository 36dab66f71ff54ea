// The runtime's part in process sets and join (see runtime.h, and docs/architecture.md, "Process
// sets and join"): which responses are this rank's, a joined rank's zeros, the collective changes.
#include <algorithm>
#include <cstdlib>

#include "core/log.h"
#include "runtime/runtime.h"

namespace ranktime {

bool Runtime::gather_entries(const Response& r) {
  entries_scratch_.clear();
  // Another set's response: not this rank's, unless it fails tensors this rank submitted (the
  // set was removed meanwhile).
  if (r.process_set != kGlobalSet && r.error.empty() && !sets_.member(r.process_set)) return false;
  size_t missing = 0;
  for (size_t i = 0; i < r.names.size(); ++i) {
    auto it = in_flight_.find(r.names[i]);
    if (it == in_flight_.end()) {
      entries_scratch_.push_back(nullptr);
      ++missing;
      continue;
    }
    entries_scratch_.push_back(it->second.get());
    if (rank() != 0) {  // rank 0's cache ids (an error's are 0: forget the name)
      const bool cached = r.error.empty() && !r.cache_ids.empty();
      worker_cache_.learn(it->second->request, cached ? r.cache_ids[i] : 0);
    }
  }
  if (missing == 0) return true;
  // An error fails whatever this rank has of it; a joined rank takes part in an allreduce with
  // zeros, and has nothing to do in a barrier.
  if (r.error.empty() && r.tensor_sizes.size() == r.names.size()) {
    join_zeros_.fill(r, &entries_scratch_);
    return true;
  }
  const bool expected = !r.error.empty() || r.op == OpType::kBarrier;
  entries_scratch_.erase(std::remove(entries_scratch_.begin(), entries_scratch_.end(), nullptr),
                         entries_scratch_.end());
  if (expected) return !entries_scratch_.empty();
  for (const std::string& name : r.names) {
    if (in_flight_.count(name) == 0) {
      RANKTIME_LOG(kError,
                   "rank 0 scheduled tensor '" << name << "', which this rank never submitted");
    }
  }
  for (TensorEntry* e : entries_scratch_) {
    complete(e, Status::Error("tensor '" + e->request.name +
                              "': internal error: inconsistent response"));
  }
  return false;
}

void Runtime::execute_set_change(const Response& r, const std::vector<TensorEntry*>& entries) {
  Status status = r.error.empty() ? Status::Ok() : Status::Error(r.error);
  if (status.ok() && r.op != OpType::kJoin) {
    const bool add = r.op == OpType::kAddProcessSet;
    const ProcessSet* removed = add ? nullptr : sets_.table().find(std::atoi(r.argument.c_str()));
    const std::string what = removed ? process_set_text(*removed) : "";
    // A removed set's device work finishes and is delivered before its communicator is freed.
    if (!add) drain_backends();
    const std::string error = sets_.apply(r, *world_, &clock_, config_, wake_for_completions_);
    if (!error.empty()) {
      status = Status::Error(op_type_name(r.op) + std::string(": ") + error);
    } else {
      // On pid 0 of the timeline: when the set's tensors start and stop.
      const ProcessSet* added = add ? sets_.table().find(r.root) : nullptr;
      timeline_->instant(add ? "PROCESS_SET_ADDED" : "PROCESS_SET_REMOVED",
                         added ? process_set_text(*added) : what, clock_.now_ns());
    }
  }
  for (TensorEntry* e : entries) {
    // What the caller gets back: a new set's id, or the rank that joined last.
    if (status.ok()) e->handle->output_shape = {r.root};
    complete(e, status);
  }
}

}  // namespace ranktime
