// Negotiation on rank 0: readiness bookkeeping, then validation and fusion of what is ready; the
// response cache's rank-0 side.
#include "negotiation/coordinator.h"

#include <algorithm>

#include "negotiation/response_cache.h"

namespace ranktime {
namespace {

// A cache id: the slot + 1 in the low bits, a generation above, so that an id from before a
// slot was reused names no tensor rather than the wrong one.
constexpr int kSlotBits = 20;
constexpr uint32_t kSlotMask = (uint32_t{1} << kSlotBits) - 1;
constexpr int64_t kMissing = INT64_MIN;

std::string duplicate_message(const std::string& name, int rank) {
  return "tensor '" + name + "': rank " + std::to_string(rank) +
         " submitted it twice while in flight";
}

// One tensor's response, with rank 0's request's fields.
Response single_response(const Request& q, uint32_t tensor_id) {
  Response s;
  s.op = q.op;
  s.reduce_op = q.reduce_op;
  s.dtype = q.dtype;
  s.device = q.device;
  s.root = q.root;
  s.flags = q.flags;
  s.argument = q.argument;
  s.names.push_back(q.name);
  s.tensor_ids.push_back(tensor_id);
  return s;
}

}  // namespace

Coordinator::Coordinator(int size, TensorIds* ids, size_t cache_capacity)
    : size_(size),
      ids_(ids),
      capacity_(std::min(cache_capacity, kMaxCacheCapacity)),
      seen_(size, 0) {}

void Coordinator::add(int rank, Request request) {
  auto slot_it = slot_of_name_.find(request.name);
  if (slot_it != slot_of_name_.end()) {
    Slot& slot = slots_[(slot_it->second & kSlotMask) - 1];
    if (!slot.in_table) move_to_table(slot);
  }
  auto [it, inserted] = table_.try_emplace(request.name);
  Entry& e = it->second;
  if (inserted) e.by_rank.resize(size_);
  if (e.by_rank[rank]) {
    e.duplicate_error = duplicate_message(request.name, rank);
    return;
  }
  e.first_ready_ns = std::min(e.first_ready_ns, request.ready_ns);
  e.by_rank[rank] = std::move(request);
  if (++e.count == size_) completed_.push_back(Done{-1, it->first});
}

Coordinator::Slot* Coordinator::slot_of(uint32_t id) {
  const uint32_t index = id & kSlotMask;
  if (index == 0 || index > slots_.size()) return nullptr;
  Slot& slot = slots_[index - 1];
  return slot.id == id ? &slot : nullptr;
}

Request Coordinator::materialize(const Request& cached, int64_t ready_ns) const {
  Request q = cached;
  q.ready_ns = ready_ns;
  return q;
}

// A full request joined a tensor that ranks were negotiating through the cache: the cached
// requests become full ones, so that validation sees every rank's request as today.
void Coordinator::move_to_table(Slot& slot) {
  slot.in_table = true;
  const size_t index = static_cast<size_t>(&slot - slots_.data());
  sync_fast(index);
  if (counts_[index] == 0) return;
  counts_[index] = 0;
  first_ready_[index] = INT64_MAX;
  --pending_cached_;
  for (int r = 0; r < size_; ++r) {
    int64_t& cell = ready_row(r)[index];
    if (cell == kMissing) continue;
    const int64_t ready = cell;
    cell = kMissing;
    add(r, materialize(slot.request, ready));
  }
  if (!slot.duplicate_error.empty()) {
    table_[slot.request.name].duplicate_error = std::move(slot.duplicate_error);
    slot.duplicate_error.clear();
  }
}

std::string Coordinator::add_cached(int rank, const uint32_t* ids, const int64_t* ready_ns,
                                    size_t count, uint64_t evictions_seen) {
  seen_[rank] = std::max(seen_[rank], evictions_seen);
  std::string error;
  int64_t* row = ready_row(rank);
  for (size_t i = 0; i < count; ++i) {
    // The hot path of a steady step: one short run of writes per message.
    const size_t index = static_cast<size_t>((ids[i] & kSlotMask)) - 1;  // 0 wraps: slow path
    if (index >= fast_ids_.size() || fast_ids_[index] != ids[i]) {
      add_cached_slow(rank, ids[i], ready_ns[i], evictions_seen, &error);
      continue;
    }
    int64_t& cell = row[index];
    if (cell != kMissing) {
      slots_[index].duplicate_error = duplicate_message(slots_[index].request.name, rank);
      continue;
    }
    cell = std::max(ready_ns[i], kMissing + 1);
    first_ready_[index] = std::min(first_ready_[index], cell);
    if (counts_[index]++ == 0) ++pending_cached_;
    if (counts_[index] == size_) completed_.push_back(Done{static_cast<int32_t>(index), {}});
  }
  return error;
}

void Coordinator::add_cached_slow(int rank, uint32_t id, int64_t ready_ns, uint64_t evictions_seen,
                                  std::string* error) {
  if (Slot* slot = slot_of(id)) {  // negotiated in full this time: join it
    add(rank, materialize(slot->request, ready_ns));
    return;
  }
  for (const Retired& r : retired_) {
    if (r.id == id && evictions_seen < r.eviction) {
      // Evicted after the rank sent it: negotiate it in full.
      add(rank, materialize(r.request, ready_ns));
      return;
    }
  }
  if (error->empty()) {
    *error = "rank " + std::to_string(rank) + " sent response cache id " + std::to_string(id) +
             ", which rank 0 does not know (never given or already evicted); request dropped";
  }
}

uint32_t Coordinator::cached_id(const Request& q) const {
  auto it = slot_of_name_.find(q.name);
  if (it == slot_of_name_.end()) return 0;
  const Slot& slot = slots_[(it->second & kSlotMask) - 1];
  return same_request(slot.request, q) ? slot.id : 0;
}

std::vector<uint32_t> Coordinator::take_evicted() {
  std::vector<uint32_t> out;
  out.swap(evicted_);
  return out;
}

uint32_t Coordinator::cache(const Request& q0, uint32_t tensor_id, int64_t bytes) {
  if (capacity_ == 0 || !cacheable(q0)) {
    uncache(q0.name);
    return 0;
  }
  auto it = slot_of_name_.find(q0.name);
  Slot* slot = nullptr;
  if (it != slot_of_name_.end()) {
    slot = &slots_[(it->second & kSlotMask) - 1];
    slot->in_table = false;
    sync_fast(static_cast<size_t>(slot - slots_.data()));
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
    retired_.push_back(Retired{slot->id, ++evictions_, std::move(slot->request)});
    evicted_.push_back(slot->id);
    slot_of_name_.erase(retired_.back().request.name);
  }
  generation_ = generation_ % (UINT32_MAX >> kSlotBits) + 1;
  slot->id = (generation_ << kSlotBits) | static_cast<uint32_t>(slot - &slots_[0] + 1);
  slot->request = q0;
  slot->request.ready_ns = 0;
  slot->tensor_id = tensor_id;
  slot->bytes = bytes;
  slot->last_used = ++uses_;
  slot->in_table = false;
  sync_fast(static_cast<size_t>(slot - slots_.data()));
  slot_of_name_[q0.name] = slot->id;
  return slot->id;
}

// A new slot at the end, and room for it in ready_ (re-laid out with twice the stride).
size_t Coordinator::new_slot() {
  const size_t index = slots_.size();
  slots_.emplace_back();
  counts_.push_back(0);
  first_ready_.push_back(INT64_MAX);
  fast_ids_.push_back(0);
  if (slots_.size() > stride_) {
    const size_t stride = std::min(std::max<size_t>(16, stride_ * 2), capacity_);
    std::vector<int64_t> ready(static_cast<size_t>(size_) * stride, kMissing);
    for (int r = 0; r < size_; ++r) {
      std::copy(ready_row(r), ready_row(r) + stride_,
                ready.data() + static_cast<size_t>(r) * stride);
    }
    ready_.swap(ready);
    stride_ = stride;
  }
  return index;
}

void Coordinator::uncache(const std::string& name) {
  auto it = slot_of_name_.find(name);
  if (it == slot_of_name_.end()) return;
  const uint32_t index = (it->second & kSlotMask) - 1;
  Slot& slot = slots_[index];
  slot.id = 0;
  slot.in_table = false;
  sync_fast(index);
  slot.request = Request();
  free_slots_.push_back(index);
  slot_of_name_.erase(it);
}

// Forgets retired requests every rank has seen evicted.
void Coordinator::retire_seen() {
  if (retired_.empty()) return;
  uint64_t least = evictions_;
  for (int r = 1; r < size_; ++r) least = std::min(least, seen_[r]);
  auto known = std::find_if(retired_.begin(), retired_.end(),
                            [&](const Retired& r) { return r.eviction > least; });
  retired_.erase(retired_.begin(), known);
}

std::vector<Response> Coordinator::take_ready(const FusionOptions& options,
                                              std::vector<Negotiation>* negotiations) {
  std::vector<Response> singles;
  std::vector<int64_t> bytes;
  singles.reserve(completed_.size());
  bytes.reserve(completed_.size());
  std::vector<Request> by_rank;
  struct Gather {
    size_t negotiation;
    size_t slot;
  };
  std::vector<Gather> gather;  // cached negotiations: ready times to copy out of ready_
  const size_t first = negotiations->size();
  std::vector<GroupOf> groups;  // parallel to singles
  bool grouped = false;
  for (Done& done : completed_) {
    Response s;
    Negotiation n;
    if (done.slot >= 0) {
      // Through the cache: every rank sent the request that was validated when it was cached.
      const size_t index = static_cast<size_t>(done.slot);
      Slot& slot = slots_[index];
      if (counts_[index] != size_) continue;  // moved to table_ by a duplicate full request
      --pending_cached_;
      counts_[index] = 0;
      first_ready_[index] = INT64_MAX;
      const Request& q = slot.request;
      groups.push_back(GroupOf{q.group, q.group_size});
      s = single_response(q, slot.tensor_id);
      s.error = std::move(slot.duplicate_error);
      slot.duplicate_error.clear();
      n.tensor_id = slot.tensor_id;
      n.op = q.op;
      n.error = s.error;
      n.ready_ns.resize(size_);
      gather.push_back({negotiations->size(), index});
      bytes.push_back(slot.bytes);
      if (s.error.empty()) {
        slot.last_used = ++uses_;
        s.cache_ids.push_back(slot.id);
      } else {
        s.cache_ids.push_back(0);
        uncache(q.name);
      }
    } else {
      auto node = table_.extract(done.name);
      Entry& e = node.mapped();
      by_rank.clear();
      for (auto& q : e.by_rank) by_rank.push_back(std::move(*q));
      const Request& q0 = by_rank[0];
      groups.push_back(GroupOf{q0.group, q0.group_size});
      s = single_response(q0, ids_->id_of(done.name));
      s.error = e.duplicate_error.empty() ? validate_requests(by_rank) : e.duplicate_error;
      if (s.error.empty() && s.op == OpType::kAllgather) {
        for (const Request& q : by_rank) s.first_dims.push_back(q.shape[0]);
      }
      n.tensor_id = s.tensor_ids[0];
      n.op = q0.op;
      n.error = s.error;
      n.ready_ns.reserve(by_rank.size());
      for (const Request& q : by_rank) n.ready_ns.push_back(q.ready_ns);
      bytes.push_back(request_bytes(q0));
      if (s.error.empty()) {
        s.cache_ids.push_back(cache(q0, s.tensor_ids[0], bytes.back()));
      } else {
        uncache(done.name);
        s.cache_ids.push_back(0);
      }
    }
    if (capacity_ == 0) s.cache_ids.clear();
    grouped = grouped || groups.back().size > 0;
    negotiations->push_back(std::move(n));
    singles.push_back(std::move(s));
  }
  completed_.clear();
  // Row by row: each rank's times are one short run, each negotiation's vector is filled in order.
  if (!gather.empty()) {
    for (int r = 0; r < size_; ++r) {
      int64_t* row = ready_row(r);
      for (const Gather& g : gather) {
        (*negotiations)[g.negotiation].ready_ns[r] = row[g.slot];
        row[g.slot] = kMissing;
      }
    }
  }
  retire_seen();
  if (grouped) hold_groups(groups, &singles, &bytes, negotiations, first);
  return plan_fusion(singles, bytes, options);
}

void Coordinator::hold_groups(const std::vector<GroupOf>& groups, std::vector<Response>* singles,
                              std::vector<int64_t>* bytes, std::vector<Negotiation>* negotiations,
                              size_t first) {
  size_t kept = 0;
  std::vector<Response> released;
  std::vector<Negotiation> released_negotiations;
  for (size_t i = 0; i < singles->size(); ++i) {
    Negotiation& n = (*negotiations)[first + i];
    if (groups[i].size == 0) {
      (*singles)[kept] = std::move((*singles)[i]);
      (*bytes)[kept] = (*bytes)[i];
      (*negotiations)[first + kept] = std::move(n);
      ++kept;
      continue;
    }
    HeldGroup& g = groups_[groups[i].name];
    if (g.members.empty()) {
      g.size = groups[i].size;
    } else if (groups[i].size != g.size && g.mismatch.empty()) {
      g.mismatch = "tensor '" + (*singles)[i].names[0] + "' is one of " +
                   std::to_string(groups[i].size) + " tensors, tensor '" + g.members[0].names[0] +
                   "' one of " + std::to_string(g.size);
    }
    g.members.push_back(std::move((*singles)[i]));
    g.negotiations.push_back(std::move(n));
    ++held_;
    if (g.members.size() < g.size) continue;
    held_ -= g.members.size();
    for (Response& r : release(groups[i].name, g)) released.push_back(std::move(r));
    for (Negotiation& m : g.negotiations) released_negotiations.push_back(std::move(m));
    groups_.erase(groups[i].name);
  }
  singles->resize(kept);
  bytes->resize(kept);
  negotiations->resize(first + kept);
  for (Response& r : released) {
    singles->push_back(std::move(r));
    bytes->push_back(0);  // already laid out: plan_fusion passes it through
  }
  for (Negotiation& n : released_negotiations) negotiations->push_back(std::move(n));
}

std::vector<Response> Coordinator::release(const std::string& name, HeldGroup& group) {
  std::string error = group.mismatch;
  const Response& lead = group.members.front();
  for (const Response& m : group.members) {
    if (!error.empty()) break;
    if (!m.error.empty()) {
      error = m.error;
      break;
    }
    if (m.op != lead.op || m.reduce_op != lead.reduce_op || m.device != lead.device ||
        m.root != lead.root) {
      error = "tensor '" + m.names[0] + "' differs from tensor '" + lead.names[0] +
              "' in operation, reduction or device (" + op_type_name(m.op) + " on device " +
              std::to_string(m.device) + " vs " + op_type_name(lead.op) + " on device " +
              std::to_string(lead.device) + ")";
      break;
    }
  }
  if (error.empty()) {
    // A tensor's cache slot may have been evicted while its group waited: then it goes uncached.
    for (Response& m : group.members) {
      if (!m.cache_ids.empty() && m.cache_ids[0] != 0 && slot_of(m.cache_ids[0]) == nullptr)
        m.cache_ids[0] = 0;
    }
    return plan_group(std::move(group.members));
  }
  // All or nothing: one response fails every tensor; nobody caches any of them.
  error = "group '" + name + "' failed: " + error;
  Response failed = group.members.front();
  failed.names.clear();
  failed.tensor_ids.clear();
  failed.cache_ids.clear();
  failed.first_dims.clear();
  failed.error = error;
  for (const Response& m : group.members) {
    failed.names.push_back(m.names[0]);
    failed.tensor_ids.push_back(m.tensor_ids[0]);
    if (capacity_ > 0) failed.cache_ids.push_back(0);
    uncache(m.names[0]);
  }
  for (Negotiation& n : group.negotiations) n.error = error;
  return {std::move(failed)};
}

std::vector<Coordinator::Stalled> Coordinator::stalled(int64_t older_than_ns) const {
  std::vector<Stalled> out;
  for (const auto& [name, e] : table_) {
    if (e.first_ready_ns > older_than_ns) continue;
    Stalled s{name, {}, e.first_ready_ns};
    for (int r = 0; r < size_; ++r) {
      if (!e.by_rank[r]) s.missing_ranks.push_back(r);
    }
    out.push_back(std::move(s));
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (counts_[i] == 0 || first_ready_[i] > older_than_ns) continue;
    Stalled s{slots_[i].request.name, {}, first_ready_[i]};
    for (int r = 0; r < size_; ++r) {
      if (ready_[static_cast<size_t>(r) * stride_ + i] == kMissing) s.missing_ranks.push_back(r);
    }
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(),
            [](const Stalled& a, const Stalled& b) { return a.first_ready_ns < b.first_ready_ns; });
  return out;
}

size_t Coordinator::pending() const { return table_.size() + pending_cached_ + held_; }

std::vector<std::string> Coordinator::drain() {
  std::vector<std::string> names;
  for (auto& [name, e] : table_) names.push_back(name);
  table_.clear();
  completed_.clear();
  pending_cached_ = 0;
  for (auto& [group, held] : groups_) {
    for (const Response& m : held.members) names.push_back(m.names[0]);
  }
  groups_.clear();
  held_ = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (counts_[i] > 0) names.push_back(slots_[i].request.name);
    counts_[i] = 0;
    first_ready_[i] = INT64_MAX;
    slots_[i].in_table = false;
    sync_fast(i);
    slots_[i].duplicate_error.clear();
  }
  std::fill(ready_.begin(), ready_.end(), kMissing);
  return names;
}

}  // namespace ranktime
