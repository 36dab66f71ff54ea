// The response cache, rank 0's side: a tensor negotiated without error gets a slot and a small id
// (Response::cache_ids); while a rank's request for it stays the same, the rank sends only (id,
// ready time), and rank 0 records it with one array write. The worker's side is WorkerCache
// (response_cache.h). The Coordinator drives it; pure: no MPI, no clock.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/message.h"
#include "negotiation/joined_ranks.h"

namespace ranktime {

class Rank0Cache {
 public:
  static constexpr size_t kMaxCapacity = (size_t{1} << 20) - 1;
  // A ready time of a rank that has not sent the id (in this negotiation).
  static constexpr int64_t kMissing = INT64_MIN;
  // What add() did when the slot is not complete yet.
  static constexpr int32_t kRecorded = -1;  // recorded, or a duplicate (the slot's error)
  static constexpr int32_t kNotFast = -2;   // not an id in use for the fast path: request_of()

  // `capacity`: the most tensors it holds (0: no cache; at most kMaxCapacity).
  Rank0Cache(int size, size_t capacity);
  bool enabled() const { return capacity_ > 0; }

  // A cached tensor: its validated request (rank 0's, ready_ns 0), what its responses carry.
  struct Slot {
    uint32_t id = 0;  // 0: free
    Request request;
    uint32_t tensor_id = 0;
    int64_t bytes = 0;
    uint64_t last_used = 0;
    bool in_table = false;  // a full request for this name is pending in the table: join it there
    std::string duplicate_error;
  };
  const Slot& slot(size_t index) const { return slots_[index]; }

  // Rank 0's own requests: the id when `q` matches the cache, else 0.
  uint32_t id_for(const Request& q) const;
  // Whether `id` names a cached tensor (not evicted, not reused).
  bool knows(uint32_t id) const { return slot_of(id) != nullptr; }
  // After a full negotiation without error: caches `q0`'s tensor (or refreshes it) for `needed`
  // ranks (its set's size). Returns its id; 0 when not cacheable, off, or every slot is busy.
  uint32_t cache(const Request& q0, uint32_t tensor_id, int64_t bytes, int needed);
  // A negotiation through `slot` succeeded: it is the most recently used. Returns its id.
  uint32_t touch(size_t slot);
  // Forgets `name`'s slot without announcing it (its response carries id 0).
  void uncache(const std::string& name);
  // The ids evicted since the last call; they go in the next response list.
  std::vector<uint32_t> take_evicted();

  // The hot path (inline: a steady step is one call per rank and tensor): records `rank`'s ready
  // time for cached `id`. Returns the slot when every rank needed has now sent it (or joined:
  // `joined`), else kRecorded or kNotFast.
  int32_t add(int rank, uint32_t id, int64_t ready_ns, const JoinedRanks& joined) {
    const size_t index = static_cast<size_t>(id & kSlotMask) - 1;  // 0 wraps: not fast
    if (index >= fast_ids_.size() || fast_ids_[index] != id) return kNotFast;
    int64_t& cell = row(rank)[index];
    if (cell != kMissing) {
      note_duplicate(index, rank);
      return kRecorded;
    }
    cell = std::max(ready_ns, kMissing + 1);
    first_ready_[index] = std::min(first_ready_[index], cell);
    if (counts_[index]++ == 0) ++pending_;
    if (queued_[index] ||
        (counts_[index] != needed_[index] && (joined.count == 0 || !joined_in(index, joined)))) {
      return kRecorded;
    }
    queued_[index] = 1;
    return static_cast<int32_t>(index);
  }
  // The largest evictions_seen `rank` reported (WorkerMessage): which evictions it knew of.
  void saw_evictions(int rank, uint64_t evictions_seen) {
    seen_[rank] = std::max(seen_[rank], evictions_seen);
  }
  // What an id add() did not take stands for: a slot's request while its tensor is negotiated in
  // full, or an evicted slot's that the rank (`evictions_seen`) did not know was evicted; else
  // null (never given, or evicted before the rank could have known).
  const Request* request_of(uint32_t id, uint64_t evictions_seen) const;
  // Slots that joined ranks have now completed, in slot order.
  std::vector<int32_t> complete_with_joined(const JoinedRanks& joined);

  // Whether `rank` sent `slot`'s id in the negotiation under way.
  bool sent(int rank, size_t slot) const { return row(rank)[slot] != kMissing; }
  // Takes `slot`'s completed negotiation, moving out its duplicate error (if a rank sent it
  // twice); false when it is not complete any more (moved to the table meanwhile). Its ready
  // times stay until take_ready_ns() or take_rows().
  bool take(size_t slot, std::string* duplicate_error);
  // Moves `ranks`' ready times of `slot` into ready_ns[rank] (kMissing: did not send).
  void take_ready_ns(size_t slot, const std::vector<int>& ranks, int64_t* ready_ns);
  // Moves every rank's ready times of `slots`: out(k, rank, time) for slots[k]. Row by row: each
  // rank's times are one short run of memory.
  template <typename Out>
  void take_rows(const std::vector<size_t>& slots, Out out) {
    for (int r = 0; r < size_; ++r) {
      int64_t* cells = row(r);
      for (size_t k = 0; k < slots.size(); ++k) {
        out(k, r, cells[slots[k]]);
        cells[slots[k]] = kMissing;
      }
    }
  }

  // A negotiation through a slot, cut short: its request and who had sent it when.
  struct Unfinished {
    Request request;
    std::vector<int> ranks;
    std::vector<int64_t> ready_ns;  // parallel to ranks
    std::string duplicate_error;
  };
  // A full request for `name` arrived: from now on its ids join the table's negotiation. Returns
  // the negotiation under way through the cache, if any.
  std::optional<Unfinished> move_to_table(const std::string& name);
  // A process set is removed: its slots are retired (a member may still send an id before it
  // learns of the removal). Returns their negotiations under way, in slot order.
  std::vector<Unfinished> forget_set(int32_t set);

  // Slots with a negotiation under way.
  size_t pending() const { return pending_; }
  // Slots whose negotiation under way began (its first ready time) at or before `ns`.
  std::vector<size_t> waiting_since(int64_t ns) const;
  int64_t first_ready_ns(size_t slot) const { return first_ready_[slot]; }
  // Ends every negotiation under way, appending their names.
  void drain(std::vector<std::string>* names);
  // Forgets the evicted requests every rank has seen evicted.
  void retire_seen();

 private:
  // A cache id: the slot + 1 in the low bits, a generation above, so that an id from before a
  // slot was reused names no tensor rather than the wrong one.
  static constexpr int kSlotBits = 20;
  static constexpr uint32_t kSlotMask = (uint32_t{1} << kSlotBits) - 1;
  static_assert(kMaxCapacity == kSlotMask);

  // An evicted slot's request, kept until every rank has seen the eviction.
  struct Retired {
    uint32_t id;
    uint64_t eviction;  // its number: evictions_seen >= this means the rank knew
    Request request;
  };

  const Slot* slot_of(uint32_t id) const;
  void note_duplicate(size_t slot, int rank);
  // Whether the joined ranks complete `slot` (an operation they take part in).
  bool joined_in(size_t slot, const JoinedRanks& joined) const;
  int64_t* row(int rank) { return ready_.data() + static_cast<size_t>(rank) * stride_; }
  const int64_t* row(int rank) const { return ready_.data() + static_cast<size_t>(rank) * stride_; }
  size_t index_of(const Slot& slot) const { return static_cast<size_t>(&slot - slots_.data()); }
  void sync_fast(size_t i) { fast_ids_[i] = slots_[i].in_table ? 0 : slots_[i].id; }
  size_t new_slot();
  // Ends `slot`'s negotiation under way (if any), into *out.
  bool take_unfinished(size_t slot, Unfinished* out);
  // Forgets a slot's id as an eviction (announced in the next list), keeping its request for ids
  // ranks sent before they learnt of it.
  void retire(Slot& slot);
  void free_slot(size_t slot);

  int size_;
  size_t capacity_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  std::unordered_map<std::string, uint32_t> slot_of_name_;  // name -> id
  uint64_t uses_ = 0;
  uint32_t generation_ = 0;
  uint64_t evictions_ = 0;
  std::vector<uint32_t> evicted_;
  std::vector<Retired> retired_;  // oldest first
  std::vector<uint64_t> seen_;    // per rank: the largest evictions_seen it reported
  size_t pending_ = 0;            // slots with a negotiation under way
  // Per slot: how many ranks have sent it, the earliest ready time.
  std::vector<int> counts_;
  std::vector<int64_t> first_ready_;
  // Per slot: its id while cached requests may go straight into ready_ (not in the table), else 0.
  std::vector<uint32_t> fast_ids_;
  // Per slot: how many ranks must send it (its set's size), whether it is complete and queued.
  std::vector<int> needed_;
  std::vector<char> queued_;
  // Ready times by rank, then slot (kMissing: not yet): a rank's message writes one short run
  // of memory, and take_rows() reads them row by row. stride_ slots per rank.
  std::vector<int64_t> ready_;
  size_t stride_ = 0;
};

}  // namespace ranktime
