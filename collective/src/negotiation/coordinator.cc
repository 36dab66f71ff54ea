// Negotiation on rank 0: readiness bookkeeping (process sets, join), then validation and fusion
// of what is ready; the response cache's rank-0 side.
#include "negotiation/coordinator.h"

#include <algorithm>
#include <cstdlib>

#include "negotiation/response_cache.h"

namespace ranktime {
namespace {

// A cache id: the slot + 1 in the low bits, a generation above, so that an id from before a
// slot was reused names no tensor rather than the wrong one.
constexpr int kSlotBits = 20;
constexpr uint32_t kSlotMask = (uint32_t{1} << kSlotBits) - 1;

std::string duplicate_message(const std::string& name, int rank) {
  return "tensor '" + name + "': rank " + std::to_string(rank) +
         " submitted it twice while in flight";
}

}  // namespace

Response Coordinator::single_response(const Request& q, uint32_t tensor_id) {
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
  s.process_set = q.process_set;
  return s;
}

Coordinator::Coordinator(int size, TensorIds* ids, size_t cache_capacity, const ProcessSets* sets)
    : size_(size),
      ids_(ids),
      capacity_(std::min(cache_capacity, kMaxCacheCapacity)),
      seen_(size, 0),
      sets_(sets),
      joined_(size, 0) {
  for (int r = 0; r < size; ++r) all_.ranks.push_back(r);
}

template <typename Asked>
bool Coordinator::all_in(int count, int needed, bool joins_count, Asked asked) const {
  if (count >= needed) return true;
  if (joined_count_ == 0 || !joins_count) return false;
  for (int r = 0; r < size_; ++r) {
    if (joined_[r] && !asked(r)) ++count;
  }
  return count >= needed;
}

void Coordinator::queue_entry(const std::string& name, Entry& e) {
  if (e.queued) return;
  e.queued = true;
  completed_.push_back(Done{-1, name});
}

void Coordinator::add(int rank, Request request) {
  const ProcessSet* set = set_of(request.process_set);
  if (set == nullptr || !set->contains(rank)) {
    fail_now(rank, request, set);
    return;
  }
  auto slot_it = slot_of_name_.find(request.name);
  if (slot_it != slot_of_name_.end()) {
    Slot& slot = slots_[(slot_it->second & kSlotMask) - 1];
    if (!slot.in_table) move_to_table(slot);
  }
  auto [it, inserted] = table_.try_emplace(request.name);
  Entry& e = it->second;
  if (inserted) {
    e.by_rank.resize(size_);
    e.process_set = request.process_set;
    e.needed = set->size();
    e.joins_count = join_counts(request);
  }
  if (e.by_rank[rank]) {
    e.duplicate_error = duplicate_message(request.name, rank);
    return;
  }
  const bool join = request.op == OpType::kJoin;
  e.first_ready_ns = std::min(e.first_ready_ns, request.ready_ns);
  e.by_rank[rank] = std::move(request);
  ++e.count;
  if (join && !joined_[rank]) {
    joined_[rank] = 1;
    ++joined_count_;
    last_joined_ = rank;
    sweep_for_join();  // before the join itself can complete: their responses need the joins
  }
  if (all_in(e.count, e.needed, e.joins_count, [&](int r) { return e.by_rank[r].has_value(); })) {
    queue_entry(it->first, e);
  }
}

void Coordinator::sweep_for_join() {
  for (auto& entry : table_) {
    Entry& e = entry.second;
    if (!e.queued && e.joins_count &&
        all_in(e.count, e.needed, true, [&](int r) { return e.by_rank[r].has_value(); })) {
      queue_entry(entry.first, e);
    }
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (counts_[i] == 0 || queued_[i] || !join_counts(slots_[i].request)) continue;
    if (all_in(counts_[i], needed_[i], true, [&](int r) { return ready_row(r)[i] != kMissing; })) {
      queued_[i] = 1;
      completed_.push_back(Done{static_cast<int32_t>(i), {}});
    }
  }
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
  queued_[index] = 0;
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
    if (!queued_[index] && (counts_[index] == needed_[index] ||
                            (joined_count_ > 0 && join_counts(slots_[index].request) &&
                             all_in(counts_[index], needed_[index], true,
                                    [&](int r) { return ready_row(r)[index] != kMissing; })))) {
      queued_[index] = 1;
      completed_.push_back(Done{static_cast<int32_t>(index), {}});
    }
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
    retire_slot(*slot);
  }
  generation_ = generation_ % (UINT32_MAX >> kSlotBits) + 1;
  slot->id = (generation_ << kSlotBits) | static_cast<uint32_t>(slot - &slots_[0] + 1);
  slot->request = q0;
  slot->request.ready_ns = 0;
  slot->tensor_id = tensor_id;
  slot->bytes = bytes;
  const ProcessSet* set = set_of(q0.process_set);
  needed_[static_cast<size_t>(slot - slots_.data())] = set ? set->size() : size_;
  slot->last_used = ++uses_;
  slot->in_table = false;
  sync_fast(static_cast<size_t>(slot - slots_.data()));
  slot_of_name_[q0.name] = slot->id;
  return slot->id;
}

void Coordinator::retire_slot(Slot& slot) {
  retired_.push_back(Retired{slot.id, ++evictions_, std::move(slot.request)});
  evicted_.push_back(slot.id);
  slot_of_name_.erase(retired_.back().request.name);
  slot.request = Request();
}

// A new slot at the end, and room for it in ready_ (re-laid out with twice the stride).
size_t Coordinator::new_slot() {
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

template <typename ReadyOf>
void Coordinator::fill_ticks(const ProcessSet& set, ReadyOf ready_of, Negotiation* n) const {
  int64_t first = INT64_MAX;
  for (int r : set.ranks) {
    const int64_t t = ready_of(r);
    if (t == kMissing) continue;
    n->ranks.push_back(r);
    n->ready_ns.push_back(t);
    first = std::min(first, t);
  }
  for (int r : set.ranks) {
    if (ready_of(r) != kMissing || !joined_[r]) continue;
    n->ranks.push_back(r);
    n->ready_ns.push_back(first);
    ++n->joined;
  }
}

std::vector<Response> Coordinator::take_ready(const FusionOptions& options,
                                              std::vector<Negotiation>* negotiations) {
  std::vector<Response> singles;
  std::vector<int64_t> bytes;
  singles.reserve(completed_.size());
  bytes.reserve(completed_.size());
  // Tensors failed for their process set (fail_now(), fail_set()): no negotiation, never grouped
  // or fused; they go first, before a removal that follows them.
  std::vector<Response> failures = std::move(failed_);
  failed_.clear();
  std::vector<Request> by_rank;
  std::vector<int> ranks;
  std::vector<int64_t> ready_of_rank;
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
      if (!queued_[index]) continue;  // moved to table_ by a duplicate full request
      queued_[index] = 0;
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
      const ProcessSet& set = q.process_set == kGlobalSet ? all_ : *set_of(q.process_set);
      bool joined_absent = false;
      for (int r = 0; r < size_ && joined_count_ > 0; ++r)
        joined_absent = joined_absent || (joined_[r] && ready_row(r)[index] == kMissing);
      if (q.process_set == kGlobalSet && !joined_absent) {
        n.ready_ns.resize(size_);
        gather.push_back({negotiations->size(), index});
      } else {
        fill_ticks(
            set, [&](int r) { return ready_row(r)[index]; }, &n);
        for (int r : set.ranks) ready_row(r)[index] = kMissing;
      }
      if (s.error.empty()) apply_set_and_join(set, q, joined_absent, &s);
      n.error = s.error;
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
      if (node.empty()) continue;  // failed with its process set
      Entry& e = node.mapped();
      by_rank.clear();
      ranks.clear();
      for (int r = 0; r < size_; ++r) {
        if (!e.by_rank[r]) continue;
        by_rank.push_back(std::move(*e.by_rank[r]));
        ranks.push_back(r);
      }
      const bool whole = static_cast<int>(ranks.size()) == size_;
      const Request& q0 = by_rank[0];
      groups.push_back(GroupOf{q0.group, q0.group_size});
      const ProcessSet* set = set_of(e.process_set);
      s = single_response(q0, ids_->id_of(done.name));
      s.error = e.duplicate_error.empty()
                    ? validate_requests(by_rank, whole ? nullptr : &ranks, whole ? nullptr : set)
                    : e.duplicate_error;
      if (s.error.empty() && q0.op == OpType::kRemoveProcessSet) {
        const ProcessSet* gone = set_of(static_cast<int32_t>(std::atoi(q0.argument.c_str())));
        if (gone == nullptr || gone->id == kGlobalSet) {
          s.error = "remove_process_set: process set " + q0.argument + " does not exist";
        } else {
          fail_set(*gone, &failures);
        }
      }
      if (s.error.empty() && is_control_op(q0.op)) finish_control(q0, &s);
      if (s.error.empty()) apply_set_and_join(*set, q0, ranks.size() < set->ranks.size(), &s);
      if (s.error.empty() && s.op == OpType::kAllgather) {
        for (const Request& q : by_rank) s.first_dims.push_back(q.shape[0]);
      }
      n.tensor_id = s.tensor_ids[0];
      n.op = q0.op;
      n.error = s.error;
      if (whole) {
        n.ready_ns.reserve(by_rank.size());
        for (const Request& q : by_rank) n.ready_ns.push_back(q.ready_ns);
      } else {
        ready_of_rank.assign(size_, kMissing);
        for (size_t i = 0; i < ranks.size(); ++i) ready_of_rank[ranks[i]] = by_rank[i].ready_ns;
        fill_ticks(
            *set, [&](int r) { return ready_of_rank[r]; }, &n);
      }
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
  if (!failures.empty()) {
    bytes.insert(bytes.begin(), failures.size(), 0);
    singles.insert(singles.begin(), std::make_move_iterator(failures.begin()),
                   std::make_move_iterator(failures.end()));
  }
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
      if (kept != i) {  // a vector moved onto itself would be left empty
        (*singles)[kept] = std::move((*singles)[i]);
        (*bytes)[kept] = (*bytes)[i];
        (*negotiations)[first + kept] = std::move(n);
      }
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
    // (A process set and a joined rank's sizes are the same for a whole group as the API makes
    // it: its tensors are submitted together, in one set.)
    if (m.op != lead.op || m.reduce_op != lead.reduce_op || m.device != lead.device ||
        m.root != lead.root || m.process_set != lead.process_set ||
        m.tensor_sizes.empty() != lead.tensor_sizes.empty()) {
      error = "tensor '" + m.names[0] + "' differs from tensor '" + lead.names[0] +
              "' in operation, reduction, device or process set (" + op_type_name(m.op) +
              " on device " + std::to_string(m.device) + " vs " + op_type_name(lead.op) +
              " on device " + std::to_string(lead.device) + ")";
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
  // Join is not a stall: a rank that ran out of data waits there for the others, for as long
  // as they have data.
  for (const auto& [name, e] : table_) {
    if (e.first_ready_ns > older_than_ns || e.queued) continue;
    const Request* any = nullptr;
    for (const auto& q : e.by_rank) any = q ? &*q : any;
    if (any != nullptr && any->op == OpType::kJoin) continue;
    Stalled s{name, {}, e.first_ready_ns};
    const ProcessSet* set = set_of(e.process_set);
    for (int r : set ? set->ranks : all_.ranks) {
      if (!e.by_rank[r]) s.missing_ranks.push_back(r);
    }
    out.push_back(std::move(s));
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (counts_[i] == 0 || queued_[i] || first_ready_[i] > older_than_ns) continue;
    Stalled s{slots_[i].request.name, {}, first_ready_[i]};
    const ProcessSet* set = set_of(slots_[i].request.process_set);
    for (int r : set ? set->ranks : all_.ranks) {
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
  failed_.clear();
  std::fill(joined_.begin(), joined_.end(), 0);
  joined_count_ = 0;
  last_joined_ = -1;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (counts_[i] > 0) names.push_back(slots_[i].request.name);
    counts_[i] = 0;
    queued_[i] = 0;
    first_ready_[i] = INT64_MAX;
    slots_[i].in_table = false;
    sync_fast(i);
    slots_[i].duplicate_error.clear();
  }
  std::fill(ready_.begin(), ready_.end(), kMissing);
  return names;
}

}  // namespace ranktime
