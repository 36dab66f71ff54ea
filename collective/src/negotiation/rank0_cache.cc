// Rank 0's side of the response cache (see rank0_cache.h).
#include "negotiation/rank0_cache.h"

#include <algorithm>

#include "negotiation/response_cache.h"
#include "negotiation/validation.h"

namespace ranktime {

Rank0Cache::Rank0Cache(int size, size_t capacity)
    : size_(size), capacity_(std::min(capacity, kMaxCapacity)), seen_(size, 0) {}

const Rank0Cache::Slot* Rank0Cache::slot_of(uint32_t id) const {
  const uint32_t index = id & kSlotMask;
  if (index == 0 || index > slots_.size()) return nullptr;
  const Slot& slot = slots_[index - 1];
  return slot.id == id ? &slot : nullptr;
}

uint32_t Rank0Cache::id_for(const Request& q) const {
  auto it = slot_of_name_.find(q.name);
  if (it == slot_of_name_.end()) return 0;
  const Slot& slot = slots_[(it->second & kSlotMask) - 1];
  return same_request(slot.request, q) ? slot.id : 0;
}

std::vector<uint32_t> Rank0Cache::take_evicted() {
  std::vector<uint32_t> out;
  out.swap(evicted_);
  return out;
}

void Rank0Cache::note_duplicate(size_t slot, int rank) {
  slots_[slot].duplicate_error = duplicate_request_error(slots_[slot].request.name, rank);
}

bool Rank0Cache::joined_in(size_t slot, const JoinedRanks& joined) const {
  return JoinedRanks::count_for(slots_[slot].request) &&
         joined.all_in(counts_[slot], needed_[slot], true, [&](int r) { return sent(r, slot); });
}

const Request* Rank0Cache::request_of(uint32_t id, uint64_t evictions_seen) const {
  if (const Slot* slot = slot_of(id)) return &slot->request;
  for (const Retired& r : retired_) {
    if (r.id == id && evictions_seen < r.eviction) return &r.request;
  }
  return nullptr;
}

std::vector<int32_t> Rank0Cache::complete_with_joined(const JoinedRanks& joined) {
  std::vector<int32_t> done;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (counts_[i] > 0 && !queued_[i] && joined_in(i, joined)) {
      queued_[i] = 1;
      done.push_back(static_cast<int32_t>(i));
    }
  }
  return done;
}

bool Rank0Cache::take(size_t slot, std::string* duplicate_error) {
  if (!queued_[slot]) return false;
  queued_[slot] = 0;
  --pending_;
  counts_[slot] = 0;
  first_ready_[slot] = INT64_MAX;
  *duplicate_error = std::move(slots_[slot].duplicate_error);
  slots_[slot].duplicate_error.clear();
  return true;
}

void Rank0Cache::take_ready_ns(size_t slot, const std::vector<int>& ranks, int64_t* ready_ns) {
  for (int r : ranks) {
    ready_ns[r] = row(r)[slot];
    row(r)[slot] = kMissing;
  }
}

bool Rank0Cache::take_unfinished(size_t slot, Unfinished* out) {
  if (counts_[slot] == 0) return false;
  counts_[slot] = 0;
  queued_[slot] = 0;
  first_ready_[slot] = INT64_MAX;
  --pending_;
  out->request = slots_[slot].request;
  out->ranks.clear();
  out->ready_ns.clear();
  for (int r = 0; r < size_; ++r) {
    int64_t& cell = row(r)[slot];
    if (cell == kMissing) continue;
    out->ranks.push_back(r);
    out->ready_ns.push_back(cell);
    cell = kMissing;
  }
  out->duplicate_error = std::move(slots_[slot].duplicate_error);
  slots_[slot].duplicate_error.clear();
  return true;
}

std::optional<Rank0Cache::Unfinished> Rank0Cache::move_to_table(const std::string& name) {
  auto it = slot_of_name_.find(name);
  if (it == slot_of_name_.end()) return std::nullopt;
  const size_t index = (it->second & kSlotMask) - 1;
  if (slots_[index].in_table) return std::nullopt;
  slots_[index].in_table = true;
  sync_fast(index);
  std::optional<Unfinished> out(std::in_place);
  if (!take_unfinished(index, &*out)) out.reset();
  return out;
}

std::vector<Rank0Cache::Unfinished> Rank0Cache::forget_set(int32_t set) {
  std::vector<Unfinished> out;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& slot = slots_[i];
    if (slot.id == 0 || slot.request.process_set != set) continue;
    Unfinished u;
    if (take_unfinished(i, &u)) out.push_back(std::move(u));
    retire(slot);
    free_slot(i);
  }
  return out;
}

uint32_t Rank0Cache::cache(const Request& q0, uint32_t tensor_id, int64_t bytes, int needed) {
  if (capacity_ == 0 || !cacheable(q0)) {
    uncache(q0.name);
    return 0;
  }
  auto it = slot_of_name_.find(q0.name);
  Slot* slot = nullptr;
  if (it != slot_of_name_.end()) {
    slot = &slots_[(it->second & kSlotMask) - 1];
    slot->in_table = false;
    sync_fast(index_of(*slot));
    if (same_request(slot->request, q0)) {
      slot->last_used = ++uses_;
      return slot->id;
    }
  } else if (!free_slots_.empty()) {
    slot = &slots_[free_slots_.back()];
    free_slots_.pop_back();
  } else if (slots_.size() < capacity_) {
    slot = &slots_[new_slot()];
  } else {
    // Evict the least recently used slot that nobody is negotiating.
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      if (counts_[i] == 0 && !s.in_table && (slot == nullptr || s.last_used < slot->last_used)) {
        slot = &s;
      }
    }
    if (slot == nullptr) return 0;
    retire(*slot);
  }
  const size_t index = index_of(*slot);
  generation_ = generation_ % (UINT32_MAX >> kSlotBits) + 1;
  slot->id = (generation_ << kSlotBits) | static_cast<uint32_t>(index + 1);
  slot->request = q0;
  slot->request.ready_ns = 0;
  slot->tensor_id = tensor_id;
  slot->bytes = bytes;
  needed_[index] = needed;
  slot->last_used = ++uses_;
  slot->in_table = false;
  sync_fast(index);
  slot_of_name_[q0.name] = slot->id;
  return slot->id;
}

uint32_t Rank0Cache::touch(size_t slot) {
  slots_[slot].last_used = ++uses_;
  return slots_[slot].id;
}

void Rank0Cache::retire(Slot& slot) {
  retired_.push_back(Retired{slot.id, ++evictions_, std::move(slot.request)});
  evicted_.push_back(slot.id);
  slot_of_name_.erase(retired_.back().request.name);
  slot.request = Request();
}

// A new slot at the end, and room for it in ready_ (re-laid out with twice the stride).
size_t Rank0Cache::new_slot() {
  const size_t index = slots_.size();
  slots_.emplace_back();
  counts_.push_back(0);
  first_ready_.push_back(INT64_MAX);
  fast_ids_.push_back(0);
  needed_.push_back(size_);
  queued_.push_back(0);
  if (slots_.size() > stride_) {
    const size_t stride = std::min(std::max<size_t>(16, stride_ * 2), capacity_);
    std::vector<int64_t> ready(static_cast<size_t>(size_) * stride, kMissing);
    for (int r = 0; r < size_; ++r) {
      std::copy(row(r), row(r) + stride_, ready.data() + static_cast<size_t>(r) * stride);
    }
    ready_.swap(ready);
    stride_ = stride;
  }
  return index;
}

void Rank0Cache::free_slot(size_t slot) {
  slots_[slot].id = 0;
  slots_[slot].in_table = false;
  sync_fast(slot);
  slots_[slot].request = Request();
  free_slots_.push_back(static_cast<uint32_t>(slot));
}

void Rank0Cache::uncache(const std::string& name) {
  auto it = slot_of_name_.find(name);
  if (it == slot_of_name_.end()) return;
  free_slot((it->second & kSlotMask) - 1);
  slot_of_name_.erase(it);
}

void Rank0Cache::retire_seen() {
  if (retired_.empty()) return;
  uint64_t least = evictions_;
  for (int r = 1; r < size_; ++r) least = std::min(least, seen_[r]);
  auto known = std::find_if(retired_.begin(), retired_.end(),
                            [&](const Retired& r) { return r.eviction > least; });
  retired_.erase(retired_.begin(), known);
}

std::vector<size_t> Rank0Cache::waiting_since(int64_t ns) const {
  std::vector<size_t> out;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (counts_[i] > 0 && !queued_[i] && first_ready_[i] <= ns) out.push_back(i);
  }
  return out;
}

void Rank0Cache::drain(std::vector<std::string>* names) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (counts_[i] > 0) names->push_back(slots_[i].request.name);
    counts_[i] = 0;
    queued_[i] = 0;
    first_ready_[i] = INT64_MAX;
    slots_[i].in_table = false;
    sync_fast(i);
    slots_[i].duplicate_error.clear();
  }
  pending_ = 0;
  std::fill(ready_.begin(), ready_.end(), kMissing);
}

}  // namespace ranktime
