// Rank 0's record of the ranks whose join() is pending. While any has joined, an allreduce of
// set 0 is ready once every other rank asked: a joined rank counts as having asked (Horovod's
// join). The Coordinator owns it; its response cache reads it. Pure.
#pragma once

#include <algorithm>
#include <vector>

#include "core/message.h"
#include "negotiation/process_sets.h"

namespace ranktime {

struct JoinedRanks {
  explicit JoinedRanks(int size) : by_rank(size, 0) {}

  // Whether a joined rank counts as having asked for a tensor of `q`'s kind: an operation of set
  // 0 that moves data (an allreduce is then done with the joined ranks' zeros; the others fail).
  static bool count_for(const Request& q) {
    return q.process_set == kGlobalSet && !is_control_op(q.op);
  }

  // Whether `asking` of `needed` ranks, and (when `joins_count`) the joined ranks that did not
  // ask (`asked(r)` says whether rank r did), make every member.
  template <typename Asked>
  bool all_in(int asking, int needed, bool joins_count, Asked asked) const {
    if (asking >= needed) return true;
    if (count == 0 || !joins_count) return false;
    for (size_t r = 0; r < by_rank.size(); ++r) {
      if (by_rank[r] && !asked(static_cast<int>(r))) ++asking;
    }
    return asking >= needed;
  }

  // Records `rank`'s join; false when it had joined already.
  bool add(int rank) {
    if (by_rank[rank]) return false;
    by_rank[rank] = 1;
    ++count;
    last = rank;
    return true;
  }

  void clear() {
    std::fill(by_rank.begin(), by_rank.end(), 0);
    count = 0;
    last = -1;
  }

  std::vector<char> by_rank;  // per rank: its join is pending
  int count = 0;
  int last = -1;  // the last rank that joined (the join response's root)
};

}  // namespace ranktime
