// The worker's response cache (see response_cache.h).
#include "negotiation/response_cache.h"

namespace ranktime {

bool cacheable(const Request& q) {
  return q.error.empty() && q.op != OpType::kAllgather && !is_control_op(q.op);
}

bool same_request(const Request& a, const Request& b) {
  return a.name == b.name && a.op == b.op && a.reduce_op == b.reduce_op && a.dtype == b.dtype &&
         a.device == b.device && a.root == b.root && a.shape == b.shape && a.flags == b.flags &&
         a.argument == b.argument && a.error == b.error && a.group_size == b.group_size &&
         a.group == b.group && a.process_set == b.process_set;
}

uint32_t WorkerCache::id_for(const Request& q) const {
  auto it = by_name_.find(q.name);
  if (it == by_name_.end() || !same_request(it->second.request, q)) return 0;
  return it->second.id;
}

void WorkerCache::learn(const Request& q, uint32_t id) {
  auto it = by_name_.find(q.name);
  if (it != by_name_.end()) {
    name_of_id_.erase(it->second.id);
    if (id == 0) {
      by_name_.erase(it);
      return;
    }
  } else if (id == 0) {
    return;
  }
  Entry& e = by_name_[q.name];
  e.id = id;
  e.request = q;
  e.request.ready_ns = 0;
  name_of_id_[id] = q.name;
}

void WorkerCache::evict(const std::vector<uint32_t>& ids) {
  for (uint32_t id : ids) {
    auto it = name_of_id_.find(id);
    if (it != name_of_id_.end()) {
      by_name_.erase(it->second);
      name_of_id_.erase(it);
    }
  }
  evictions_seen_ += ids.size();
}

void WorkerCache::split(std::vector<Request>* requests, WorkerMessage* m) const {
  m->evictions_seen = evictions_seen_;
  if (by_name_.empty()) return;
  size_t kept = 0;
  for (Request& q : *requests) {
    if (uint32_t id = id_for(q)) {
      m->cached_ids.push_back(id);
      m->cached_ready_ns.push_back(q.ready_ns);
    } else {
      Request& to = (*requests)[kept++];
      if (&to != &q) to = std::move(q);
    }
  }
  requests->resize(kept);
}

}  // namespace ranktime
