// Negotiation on rank 0: readiness bookkeeping (process sets, join), then validation and fusion
// of what is ready, full requests and the response cache's alike.
#include "negotiation/coordinator.h"

#include <algorithm>

#include "negotiation/validation.h"

namespace ranktime {
namespace {

Request with_ready(const Request& cached, int64_t ready_ns) {
  Request q = cached;
  q.ready_ns = ready_ns;
  return q;
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
    : size_(size), ids_(ids), cache_(size, cache_capacity), sets_(sets), joined_(size) {
  for (int r = 0; r < size; ++r) all_.ranks.push_back(r);
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
  // Ranks negotiating this tensor through the cache: their requests become full ones, so that
  // validation sees every rank's request.
  if (std::optional<Rank0Cache::Unfinished> moved = cache_.move_to_table(request.name)) {
    for (size_t i = 0; i < moved->ranks.size(); ++i) {
      add(moved->ranks[i], with_ready(moved->request, moved->ready_ns[i]));
    }
    if (!moved->duplicate_error.empty()) {
      table_[request.name].duplicate_error = std::move(moved->duplicate_error);
    }
  }
  auto [it, inserted] = table_.try_emplace(request.name);
  Entry& e = it->second;
  if (inserted) {
    e.by_rank.resize(size_);
    e.process_set = request.process_set;
    e.needed = set->size();
    e.joins_count = JoinedRanks::count_for(request);
  }
  if (e.by_rank[rank]) {
    e.duplicate_error = duplicate_request_error(request.name, rank);
    return;
  }
  const bool join = request.op == OpType::kJoin;
  e.first_ready_ns = std::min(e.first_ready_ns, request.ready_ns);
  e.by_rank[rank] = std::move(request);
  ++e.count;
  if (join && joined_.add(rank)) {
    sweep_for_join();  // before the join itself can complete: their responses need the joins
  }
  if (joined_.all_in(e.count, e.needed, e.joins_count,
                     [&](int r) { return e.by_rank[r].has_value(); })) {
    queue_entry(it->first, e);
  }
}

void Coordinator::sweep_for_join() {
  for (auto& entry : table_) {
    Entry& e = entry.second;
    if (!e.queued && e.joins_count &&
        joined_.all_in(e.count, e.needed, true, [&](int r) { return e.by_rank[r].has_value(); })) {
      queue_entry(entry.first, e);
    }
  }
  for (int32_t slot : cache_.complete_with_joined(joined_)) completed_.push_back(Done{slot, {}});
}

std::string Coordinator::add_cached(int rank, const uint32_t* ids, const int64_t* ready_ns,
                                    size_t count, uint64_t evictions_seen) {
  cache_.saw_evictions(rank, evictions_seen);
  std::string error;
  for (size_t i = 0; i < count; ++i) {
    const int32_t slot = cache_.add(rank, ids[i], ready_ns[i], joined_);
    if (slot >= 0) {
      completed_.push_back(Done{slot, {}});
    } else if (slot == Rank0Cache::kNotFast) {
      add_cached_slow(rank, ids[i], ready_ns[i], evictions_seen, &error);
    }
  }
  return error;
}

// An id negotiated in full this time (join it), or evicted after the rank sent it (negotiate it
// in full), or unknown.
void Coordinator::add_cached_slow(int rank, uint32_t id, int64_t ready_ns, uint64_t evictions_seen,
                                  std::string* error) {
  if (const Request* q = cache_.request_of(id, evictions_seen)) {
    add(rank, with_ready(*q, ready_ns));
  } else if (error->empty()) {
    *error = "rank " + std::to_string(rank) + " sent response cache id " + std::to_string(id) +
             ", which rank 0 does not know (never given or already evicted); request dropped";
  }
}

uint32_t Coordinator::cached_id(const Request& q) const { return cache_.id_for(q); }

std::vector<uint32_t> Coordinator::take_evicted() { return cache_.take_evicted(); }

void Coordinator::fill_ticks(const ProcessSet& set, const int64_t* ready_ns, Negotiation* n) const {
  int64_t first = INT64_MAX;
  for (int r : set.ranks) {
    if (ready_ns[r] == kMissing) continue;
    n->ranks.push_back(r);
    n->ready_ns.push_back(ready_ns[r]);
    first = std::min(first, ready_ns[r]);
  }
  for (int r : set.ranks) {
    if (ready_ns[r] != kMissing || !joined_.by_rank[r]) continue;
    n->ranks.push_back(r);
    n->ready_ns.push_back(first);
    ++n->joined;
  }
}

bool Coordinator::take_full(const std::string& name, Taken* t, Negotiation* n) {
  auto node = table_.extract(name);
  if (node.empty()) return false;  // failed with its process set
  Entry& e = node.mapped();
  std::vector<int>& ranks = t->ranks;
  ranks.clear();
  t->by_rank.clear();
  for (int r = 0; r < size_; ++r) {
    if (!e.by_rank[r]) continue;
    t->by_rank.push_back(std::move(*e.by_rank[r]));
    ranks.push_back(r);
  }
  const bool whole = static_cast<int>(ranks.size()) == size_;
  t->q0 = &t->by_rank[0];
  t->set = set_of(e.process_set);
  t->joined_absent = ranks.size() < t->set->ranks.size();
  t->tensor_id = ids_->id_of(name);
  t->bytes = request_bytes(*t->q0);
  t->error = e.duplicate_error.empty()
                 ? validate_requests(t->by_rank, whole ? nullptr : &ranks, whole ? nullptr : t->set)
                 : e.duplicate_error;
  if (whole) {
    n->ready_ns.reserve(t->by_rank.size());
    for (const Request& q : t->by_rank) n->ready_ns.push_back(q.ready_ns);
  } else {
    t->ready_ns.assign(size_, kMissing);
    for (size_t i = 0; i < ranks.size(); ++i) t->ready_ns[ranks[i]] = t->by_rank[i].ready_ns;
    fill_ticks(*t->set, t->ready_ns.data(), n);
  }
  return true;
}

bool Coordinator::take_cached(size_t slot, Taken* t, Negotiation* n, bool* deferred) {
  if (!cache_.take(slot, &t->error)) return false;  // moved to table_ by a full request
  const Rank0Cache::Slot& cached = cache_.slot(slot);
  t->by_rank.clear();
  t->q0 = &cached.request;
  t->set = t->q0->process_set == kGlobalSet ? &all_ : set_of(t->q0->process_set);
  t->joined_absent = false;
  for (int r = 0; r < size_ && joined_.count > 0; ++r) {
    t->joined_absent = t->joined_absent || (joined_.by_rank[r] && !cache_.sent(r, slot));
  }
  t->tensor_id = cached.tensor_id;
  t->bytes = cached.bytes;
  *deferred = t->q0->process_set == kGlobalSet && !t->joined_absent;
  if (*deferred) {
    n->ready_ns.resize(size_);
  } else {
    t->ready_ns.assign(size_, kMissing);
    cache_.take_ready_ns(slot, t->set->ranks, t->ready_ns.data());
    fill_ticks(*t->set, t->ready_ns.data(), n);
  }
  return true;
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
  // Cached negotiations of every rank: their ready times are copied out of the cache at the end.
  std::vector<size_t> deferred_slots;
  std::vector<size_t> deferred_at;
  const size_t first = negotiations->size();
  std::vector<GroupOf> groups;  // parallel to singles
  bool grouped = false;
  Taken t;
  for (Done& done : completed_) {
    Negotiation n;
    bool deferred = false;
    if (done.slot >= 0 ? !take_cached(static_cast<size_t>(done.slot), &t, &n, &deferred)
                       : !take_full(done.name, &t, &n)) {
      continue;
    }
    const Request& q0 = *t.q0;
    Response s = single_response(q0, t.tensor_id);
    s.error = std::move(t.error);
    if (s.error.empty() && is_control_op(q0.op)) finish_control(q0, &s, &failures);
    if (s.error.empty()) apply_set_and_join(*t.set, q0, t.joined_absent, &s);
    if (s.error.empty() && s.op == OpType::kAllgather) {
      for (const Request& q : t.by_rank) s.first_dims.push_back(q.shape[0]);
    }
    n.tensor_id = t.tensor_id;
    n.op = q0.op;
    n.error = s.error;
    groups.push_back(GroupOf{q0.group, q0.group_size});  // (before uncache() clears a slot's q0)
    grouped = grouped || groups.back().size > 0;
    uint32_t cache_id = 0;
    if (!s.error.empty()) {
      cache_.uncache(s.names[0]);
    } else if (done.slot >= 0) {
      cache_id = cache_.touch(static_cast<size_t>(done.slot));
    } else {
      cache_id = cache_.cache(q0, t.tensor_id, t.bytes, t.set->size());
    }
    if (cache_.enabled()) s.cache_ids.push_back(cache_id);
    if (deferred) {
      deferred_slots.push_back(static_cast<size_t>(done.slot));
      deferred_at.push_back(negotiations->size());
    }
    bytes.push_back(t.bytes);
    negotiations->push_back(std::move(n));
    singles.push_back(std::move(s));
  }
  completed_.clear();
  cache_.take_rows(deferred_slots, [&](size_t k, int r, int64_t ready_ns) {
    (*negotiations)[deferred_at[k]].ready_ns[r] = ready_ns;
  });
  cache_.retire_seen();
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
      if (!m.cache_ids.empty() && m.cache_ids[0] != 0 && !cache_.knows(m.cache_ids[0]))
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
    if (cache_.enabled()) failed.cache_ids.push_back(0);
    cache_.uncache(m.names[0]);
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
  for (size_t slot : cache_.waiting_since(older_than_ns)) {
    const Request& q = cache_.slot(slot).request;
    Stalled s{q.name, {}, cache_.first_ready_ns(slot)};
    const ProcessSet* set = set_of(q.process_set);
    for (int r : set ? set->ranks : all_.ranks) {
      if (!cache_.sent(r, slot)) s.missing_ranks.push_back(r);
    }
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(),
            [](const Stalled& a, const Stalled& b) { return a.first_ready_ns < b.first_ready_ns; });
  return out;
}

size_t Coordinator::pending() const { return table_.size() + cache_.pending() + held_; }

std::vector<std::string> Coordinator::drain() {
  std::vector<std::string> names;
  for (auto& [name, e] : table_) names.push_back(name);
  table_.clear();
  completed_.clear();
  for (auto& [group, held] : groups_) {
    for (const Response& m : held.members) names.push_back(m.names[0]);
  }
  groups_.clear();
  held_ = 0;
  failed_.clear();
  joined_.clear();
  cache_.drain(&names);
  return names;
}

}  // namespace ranktime
