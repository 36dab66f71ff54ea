// The response cache, a worker's side: after a tensor's first negotiation rank 0 gives it a small
// id (Response::cache_ids); while the rank's next request for that name is the same, the rank
// sends only the id and its ready time. Rank 0's side is Rank0Cache (rank0_cache.h). Pure.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/message.h"

namespace ranktime {

// Whether requests of this kind may be cached: not allgather (first dimensions vary per rank and
// step, and its response carries them), not the control operations (is_control_op), not a request
// carrying a local error. (Alltoall is: its ranks exchange their splits when it runs, its
// response is the same.)
bool cacheable(const Request& q);

// Whether two requests ask for the same thing (all but the ready time).
bool same_request(const Request& a, const Request& b);

class WorkerCache {
 public:
  // The id to send instead of `q`, or 0 when q must go in full.
  uint32_t id_for(const Request& q) const;
  // What rank 0 said about `q`'s name in a response: its id (0: not cached).
  void learn(const Request& q, uint32_t id);
  // Rank 0 evicted these ids.
  void evict(const std::vector<uint32_t>& ids);
  uint64_t evictions_seen() const { return evictions_seen_; }
  size_t size() const { return by_name_.size(); }

  // Moves the requests that hit the cache out of *requests into *m's compact pairs.
  void split(std::vector<Request>* requests, WorkerMessage* m) const;

 private:
  struct Entry {
    uint32_t id;
    Request request;
  };
  std::unordered_map<std::string, Entry> by_name_;
  std::unordered_map<uint32_t, std::string> name_of_id_;
  uint64_t evictions_seen_ = 0;
};

}  // namespace ranktime
