// Names for torch.distributed calls, which carry none: identical on every rank, the same from one
// training step to the next, and bounded in number, so the timeline shows one row per call site.
#pragma once

#include <cstddef>
#include <string>
#include <unordered_set>
#include <vector>

namespace ranktime::c10d {

// Calls are numbered in the order a rank makes them: `<prefix><index>`. The numbering restarts
// (a new round) when a call communicates a tensor already communicated in the current round, so a
// loop over the same tensors (DDP's bucket buffers, reused every step) gives each call the same
// name every time round; and after `max_round` calls, so a program that only ever communicates
// fresh tensors still cycles through a bounded set of names. Only the calls' order and which
// tensors they touch decide a name, never timing, so ranks that run the same program agree.
//
// No op kind in the name, on purpose: a rank that makes a different call at the same point (a
// broadcast where the others allreduce, another shape) then meets the others under the same
// name, and the runtime reports the mismatch on every rank instead of waiting forever.
class CallNames {
 public:
  // `prefix` distinguishes process groups ("c10d." for the default one).
  explicit CallNames(std::string prefix, size_t max_round = 1024);

  struct Next {
    std::string name;
    bool new_round = false;  // the caller may drop what it kept for the previous round
  };
  // `tensors`: identities of the tensors the call communicates (TensorImpl addresses). The caller
  // keeps each one from being reused by another tensor until the round ends.
  Next next(const std::vector<const void*>& tensors);

 private:
  std::string prefix_;
  size_t max_round_;
  size_t index_ = 0;
  std::unordered_set<const void*> round_;
};

}  // namespace ranktime::c10d
