// Rank 0's negotiation table: which tensors every rank has requested, whether the requests agree
// (validation.h), and the deterministic list of responses (fused where compatible, fusion_plan.h)
// every rank then executes. It drives rank 0's side of the response cache (rank0_cache.h): a
// tensor negotiated without error gets an id, and later requests that send only (id, ready time)
// cost an array write each. Grouped operations: a group's tensors are held until all are ready
// on every rank, then run together or fail together. Process sets: a set's tensor is ready when
// every member asked for it. Join: while ranks have joined, an allreduce of every rank is ready
// once the others asked. Pure logic: no MPI, no clock; unit tests drive it directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/message.h"
#include "negotiation/fusion_plan.h"
#include "negotiation/joined_ranks.h"
#include "negotiation/process_sets.h"
#include "negotiation/rank0_cache.h"
#include "negotiation/tensor_ids.h"
#include "negotiation/validation.h"

namespace ranktime {

// A finished negotiation: when each rank became ready (rank 0's clock), for the timeline and the
// lateness statistics.
struct Negotiation {
  uint32_t tensor_id = 0;
  OpType op = OpType::kAllreduce;
  std::vector<int64_t> ready_ns;  // per rank
  std::string error;              // the mismatch message, if the requests disagreed
  // Whose readiness ready_ns holds, when not every rank's in rank order: a process set's members,
  // or ranks that had joined. Empty: ready_ns[r] is rank r's.
  std::vector<int> ranks;
  // The last `joined` of ranks had joined instead of asking: their time is the first rank's (they
  // were ready all along); not lateness.
  int joined = 0;
};

class Coordinator {
 public:
  // `ids` names tensors for the responses and the timeline (outlives this). `cache_capacity`:
  // the most tensors the response cache holds (0: no cache; at most kMaxCacheCapacity).
  // `sets`: the process sets (outlives this; rank 0's table, changed only between calls as
  // the add and remove responses execute); null: set 0 only.
  Coordinator(int size, TensorIds* ids, size_t cache_capacity = 0,
              const ProcessSets* sets = nullptr);
  static constexpr size_t kMaxCacheCapacity = Rank0Cache::kMaxCapacity;

  // Adds `rank`'s request (ready_ns already on rank 0's clock). A second request for a name the
  // rank already has pending is recorded as an error on that tensor. A request for a process set
  // that does not exist (removed meanwhile) or does not have `rank` fails at once, for that rank.
  void add(int rank, Request request);

  // Adds `rank`'s cached requests: cache ids and ready times (on rank 0's clock), `count` of
  // each. `evictions_seen`: from the rank's message (WorkerMessage). Returns "" or, for an id rank
  // 0 does not know (never given, or evicted before the rank could have known), an error naming
  // the rank and the id; that entry is not added, the others are.
  std::string add_cached(int rank, const uint32_t* ids, const int64_t* ready_ns, size_t count,
                         uint64_t evictions_seen);
  std::string add_cached(int rank, uint32_t id, int64_t ready_ns, uint64_t evictions_seen) {
    return add_cached(rank, &id, &ready_ns, 1, evictions_seen);
  }

  // Rank 0's own requests: the cache id when `q` matches the cache, else 0.
  uint32_t cached_id(const Request& q) const;

  // The ids evicted since the last call; they go in the next response list.
  std::vector<uint32_t> take_evicted();

  // Responses for every tensor that all ranks have now requested, in the order they became
  // ready, validated and fused. Appends one Negotiation per tensor to *negotiations. A grouped
  // tensor (Request::group) waits until its whole group is ready on every rank; the group then
  // runs as plan_group() lays it out, or, if any of its tensors failed validation, every tensor
  // of the group fails with that tensor's message.
  std::vector<Response> take_ready(const FusionOptions& options,
                                   std::vector<Negotiation>* negotiations);

  // Tensors some but not all ranks have requested, and grouped tensors waiting for their group.
  size_t pending() const;

  // For the stall inspector: each pending tensor with the ranks that have not requested it yet
  // and when the first rank requested it (rank 0's clock).
  struct Stalled {
    std::string name;
    std::vector<int> missing_ranks;
    int64_t first_ready_ns;
  };
  std::vector<Stalled> stalled(int64_t older_than_ns) const;

  // Removes every pending entry (used when the job shuts down) and returns their names.
  std::vector<std::string> drain();

 private:
  struct Entry {
    std::vector<std::optional<Request>> by_rank;
    int count = 0;
    int64_t first_ready_ns = INT64_MAX;
    std::string duplicate_error;
    int32_t process_set = kGlobalSet;
    int needed = 0;            // the set's size
    bool joins_count = false;  // a joined rank counts as having asked (JoinedRanks::count_for)
    bool queued = false;       // in completed_
  };
  // A completed negotiation: a table_ name or a cache slot.
  struct Done {
    int32_t slot;  // -1: table_
    std::string name;
  };
  // A completed negotiation as take_ready() validates it, whichever way it came.
  struct Taken {
    std::vector<Request> by_rank;   // the full requests (none through the cache)
    std::vector<int> ranks;         // whose they are
    std::vector<int64_t> ready_ns;  // per rank, for fill_ticks()
    const Request* q0 = nullptr;    // rank 0's request, or the cached one
    const ProcessSet* set = nullptr;
    bool joined_absent = false;  // a joined rank did not ask
    uint32_t tensor_id = 0;
    int64_t bytes = 0;
    std::string error;  // a duplicate or validation error
  };
  // A group's tensors that every rank has requested, waiting for the rest of the group.
  struct HeldGroup {
    uint32_t size = 0;  // its first tensor's word for it
    std::vector<Response> members;
    std::vector<Negotiation> negotiations;
    std::string mismatch;  // a tensor gave another size: the group fails
  };
  // Which group a completed tensor belongs to (size 0: none).
  struct GroupOf {
    std::string name;
    uint32_t size = 0;
  };

  static constexpr int64_t kMissing = Rank0Cache::kMissing;  // a rank that has not asked
  // One tensor's response, with this request's fields.
  static Response single_response(const Request& q, uint32_t tensor_id);
  const ProcessSet* set_of(int32_t id) const;
  void queue_entry(const std::string& name, Entry& e);
  // A rank joined: tensors the others have all asked for are ready now.
  void sweep_for_join();
  // Fails `q` on `rank` at once (an unknown set, a rank outside it); goes out with the next list.
  void fail_now(int rank, const Request& q, const ProcessSet* set);
  // A set is removed: its pending tensors fail (into *out), its cached tensors are forgotten.
  void fail_set(const ProcessSet& set, std::vector<Response>* out);
  // What a control response carries (a removed set's failures into *failures, the ids, the last
  // joined rank), or an error.
  void finish_control(const Request& q0, Response* s, std::vector<Response>* failures);
  // Negotiation ticks of `set`'s members from ready_ns[r] (kMissing: did not ask), joined ranks
  // after them at the first rank's time.
  void fill_ticks(const ProcessSet& set, const int64_t* ready_ns, Negotiation* n) const;
  // Join and process-set rules for one tensor's response: the sizes a joined rank needs, the
  // operations join does not support, a set's root as its rank in the set.
  void apply_set_and_join(const ProcessSet& set, const Request& q0, bool joined_absent,
                          Response* s) const;
  // take_ready()'s two sources of a completed negotiation, into *t and n's ticks. False: nothing
  // to take any more. The full requests of table_ are validated against each other; a cache
  // slot's rank-0 request was validated when it was cached, and its ticks may be left in the
  // cache for take_ready() to copy out row by row (*deferred).
  bool take_full(const std::string& name, Taken* t, Negotiation* n);
  bool take_cached(size_t slot, Taken* t, Negotiation* n, bool* deferred);
  void add_cached_slow(int rank, uint32_t id, int64_t ready_ns, uint64_t evictions_seen,
                       std::string* error);
  // Moves the grouped tensors among *singles (negotiations from index `first` on, parallel; their
  // groups in `groups`) into groups_, and appends every group now complete, laid out or failed.
  void hold_groups(const std::vector<GroupOf>& groups, std::vector<Response>* singles,
                   std::vector<int64_t>* bytes, std::vector<Negotiation>* negotiations,
                   size_t first);
  // A complete group as the responses that run it (or one that fails every tensor).
  std::vector<Response> release(const std::string& name, HeldGroup& group);

  int size_;
  TensorIds* ids_;
  std::unordered_map<std::string, Entry> table_;
  std::vector<Done> completed_;  // in completion order
  std::unordered_map<std::string, HeldGroup> groups_;
  size_t held_ = 0;  // tensors in groups_
  Rank0Cache cache_;

  const ProcessSets* sets_;
  ProcessSet all_;                // set 0 when there is no table
  std::vector<Response> failed_;  // fail_now()'s, for the next take_ready
  JoinedRanks joined_;
  int32_t next_set_id_ = 1;
};

}  // namespace ranktime
