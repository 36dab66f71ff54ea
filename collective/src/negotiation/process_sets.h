// Process sets (Horovod's): named subsets of the ranks that run collectives among themselves.
// Set 0 is every rank; others are added and removed collectively (every rank, in the same order),
// with ids rank 0 gives out and never reuses, so a set's id names the same ranks for the whole run.
// A set's tensors are negotiated on rank 0 like any other; only its members execute them. Pure:
// every rank keeps the same table (runtime/process_set_registry.h adds the backends).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ranktime {

inline constexpr int32_t kGlobalSet = 0;

struct ProcessSet {
  int32_t id = kGlobalSet;
  std::vector<int> ranks;  // global ranks, ascending

  bool contains(int rank) const;
  // `rank`'s position among the members, or -1 when it is not one.
  int rank_of(int rank) const;
  int size() const { return static_cast<int>(ranks.size()); }
};

// "process set 2 (ranks 0,2,4-7)", for messages.
std::string process_set_text(const ProcessSet& set);
// The ranks as the wire carries them in an add request's argument: "0,2,5".
std::string ranks_argument(const std::vector<int>& ranks);
// The same back; false (and *error) when the text is not a list of ranks.
bool parse_ranks_argument(const std::string& text, std::vector<int>* ranks, std::string* error);
// Why `ranks` cannot be a set of a job of `size` ranks (empty, out of range, a rank twice), or "".
std::string check_set_ranks(const std::vector<int>& ranks, int size);
// A process set's tensor is `name` plus the set's label ("allreduce.x [process set 1: ranks
// 0,2]", timeline/process_set_label.h): names are per set, as in Horovod, and the timeline shows
// each set's tensors apart.
std::string set_tensor_name(const std::string& name, const ProcessSet& set);

class ProcessSets {
 public:
  explicit ProcessSets(int size);  // set 0, every rank

  const ProcessSet* find(int32_t id) const;
  // The set with exactly these (ascending) ranks, or null.
  const ProcessSet* with_ranks(const std::vector<int>& ranks) const;
  std::vector<int32_t> ids() const;
  void add(int32_t id, std::vector<int> ranks);
  bool remove(int32_t id);  // false for 0 or an unknown id
  // Rank 0: the id the next set added gets.
  int32_t next_id() const { return next_id_; }

 private:
  std::map<int32_t, ProcessSet> sets_;
  int32_t next_id_ = 1;
};

}  // namespace ranktime
