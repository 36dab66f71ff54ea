// Rank 0's process-set and join rules (see coordinator.h): requests of a set that is not there
// or not the rank's, a removed set's tensors, the responses of the collective changes and join,
// what a response needs while ranks have joined.
#include <algorithm>
#include <cstdlib>

#include "negotiation/coordinator.h"

namespace ranktime {

const ProcessSet* Coordinator::set_of(int32_t id) const {
  if (sets_ != nullptr) return sets_->find(id);
  return id == kGlobalSet ? &all_ : nullptr;
}

void Coordinator::fail_now(int rank, const Request& q, const ProcessSet* set) {
  Response s = single_response(q, ids_->id_of(q.name));
  s.error =
      "tensor '" + q.name + "': " +
      (set == nullptr ? "process set " + std::to_string(q.process_set) +
                            " does not exist (never added, or removed)"
                      : "rank " + std::to_string(rank) + " is not in " + process_set_text(*set));
  failed_.push_back(std::move(s));
}

void Coordinator::apply_set_and_join(const ProcessSet& set, const Request& q0, bool joined_absent,
                                     Response* s) const {
  if (joined_absent) {
    std::vector<int> joined;
    for (int r = 0; r < size_; ++r) {
      if (joined_.by_rank[r]) joined.push_back(r);
    }
    const std::string who = " (" + ranks_text(joined) + " called join())";
    if (q0.op == OpType::kBarrier) {
      // Nothing to contribute.
    } else if (q0.op != OpType::kAllreduce) {
      s->error =
          "tensor '" + q0.name + "': " + op_type_name(q0.op) +
          " is not supported while ranks have joined" + who +
          ": a joined rank takes part only in allreduces and barriers" +
          (q0.op == OpType::kAllgather ? " (with DistributedOptimizer, pass sparse_as_dense=True)"
                                       : "");
    } else {
      // Host or device alike: the joined rank makes zeros of this many elements where the
      // response runs (runtime/join_zeros.h).
      int64_t elements = 1;
      for (int64_t d : q0.shape) elements *= d;
      s->tensor_sizes.push_back(elements);
    }
  }
  if (set.id != kGlobalSet && q0.op == OpType::kBroadcast) s->root = set.rank_of(q0.root);
}

void Coordinator::finish_control(const Request& q0, Response* s, std::vector<Response>* failures) {
  if (q0.op == OpType::kRemoveProcessSet) {
    const ProcessSet* gone = set_of(static_cast<int32_t>(std::atoi(q0.argument.c_str())));
    if (gone == nullptr || gone->id == kGlobalSet) {
      s->error = "remove_process_set: process set " + q0.argument + " does not exist";
    } else {
      fail_set(*gone, failures);
    }
  } else if (q0.op == OpType::kJoin) {
    s->root = joined_.last;
    joined_.clear();
  } else if (q0.op == OpType::kAddProcessSet) {
    std::vector<int> ranks;
    std::string error;
    if (!parse_ranks_argument(q0.argument, &ranks, &error)) {
      s->error = "add_process_set: " + error;
    } else if (!(error = check_set_ranks(ranks, size_)).empty()) {
      s->error = "add_process_set: " + error;
    } else if (const ProcessSet* same = sets_ ? sets_->with_ranks(ranks) : nullptr) {
      s->error = "add_process_set: " + process_set_text(*same) + " has these ranks already";
    } else {
      s->root = next_set_id_++;
    }
  }
}

void Coordinator::fail_set(const ProcessSet& set, std::vector<Response>* out) {
  const std::string removed = process_set_text(set) + " was removed while tensor '";
  auto fail = [&](const Request& q, const std::vector<int>& missing) {
    Response s = single_response(q, ids_->id_of(q.name));
    s.error = removed + q.name + "' was in flight";
    if (!missing.empty()) s.error += " (" + ranks_text(missing) + " had not submitted it)";
    out->push_back(std::move(s));
  };
  // A group's tensors every member asked for, waiting for the rest of their group.
  for (auto it = groups_.begin(); it != groups_.end();) {
    if (it->second.members.front().process_set != set.id) {
      ++it;
      continue;
    }
    for (Response& m : it->second.members) {
      m.error = removed + m.names[0] + "' was in flight";
      m.cache_ids.assign(m.cache_ids.size(), 0);
      cache_.uncache(m.names[0]);
      out->push_back(std::move(m));
    }
    held_ -= it->second.members.size();
    it = groups_.erase(it);
  }
  std::vector<int> missing;
  for (auto it = table_.begin(); it != table_.end();) {
    Entry& e = it->second;
    if (e.process_set != set.id) {
      ++it;
      continue;
    }
    missing.clear();
    const Request* q = nullptr;
    for (int r : set.ranks) {
      if (e.by_rank[r]) {
        q = &*e.by_rank[r];
      } else {
        missing.push_back(r);
      }
    }
    fail(*q, missing);
    it = table_.erase(it);
  }
  for (const Rank0Cache::Unfinished& u : cache_.forget_set(set.id)) {
    missing.clear();
    for (int r : set.ranks) {
      if (!std::binary_search(u.ranks.begin(), u.ranks.end(), r)) missing.push_back(r);
    }
    fail(u.request, missing);
  }
}

}  // namespace ranktime
