// What ranks tell rank 0 (Request, WorkerMessage) and what rank 0 tells every rank
// (Response, ResponseList). Encoded by wire.h; decided by coordinator.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ranktime/ranktime.h"
#include "ranktime/timeline/record.h"

namespace ranktime {

// Operation kinds. Values travel on the wire: append, never reorder.
enum class OpType : uint8_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kBarrier = 3,
  kTimelineStart = 4,  // `argument` = path, `flags` bit 0 = mark cycles
  kTimelineStop = 5,
  kReducescatter = 6,  // every rank's tensor reduced, dimension 0 split among the ranks
  kAlltoall = 7,       // rows of dimension 0 sent to each rank (the entry's splits)
  // Horovod's join: this rank has no more data; until every rank has joined, it takes part in
  // the other ranks' allreduces with zeros. The response's `root` is the rank that joined last.
  kJoin = 8,
  // Process-set changes, collective over every rank (negotiation/process_sets.h). Add:
  // `argument` = the ranks ("0,2,5"); the response's `root` is the new set's id. Remove:
  // `argument` = the id of the set removed.
  kAddProcessSet = 9,
  kRemoveProcessSet = 10,
};
inline constexpr int kNumOpTypes = 11;
// Operations the runtime carries out itself, on every rank, moving no tensor data: the timeline
// controls, join and the process-set changes. Never process-set or join-dependent.
inline bool is_control_op(OpType op) {
  return op == OpType::kTimelineStart || op == OpType::kTimelineStop || op == OpType::kJoin ||
         op == OpType::kAddProcessSet || op == OpType::kRemoveProcessSet;
}
const char* op_type_name(OpType op);  // "allreduce", ...

// One rank's request for one named tensor.
struct Request {
  std::string name;
  OpType op = OpType::kAllreduce;
  ReduceOp reduce_op = ReduceOp::kSum;
  DataType dtype = DataType::kFloat32;
  int32_t device = kCpuDevice;
  int32_t root = 0;
  std::vector<int64_t> shape;
  int64_t ready_ns = 0;  // when the tensor became ready, on the submitting rank's clock
  uint8_t flags = 0;
  std::string argument;  // timeline path for kTimelineStart
  // A local validation failure (null data pointer, ...): the coordinator fails the tensor on
  // every rank with this message rather than leaving the other ranks waiting.
  std::string error;
  // Grouped operations: the group's name and how many tensors it has (0: not grouped). Rank 0
  // holds a group's tensors until all are ready on every rank, then runs them together.
  std::string group;
  uint32_t group_size = 0;
  // The process set the operation runs over (negotiation/process_sets.h); 0: every rank.
  int32_t process_set = 0;
};

// NTP-style timestamps for clock-offset refresh: t0 = rank 0 sent a response list, t1 = this
// rank received it, t2 = this rank sent this message (t0 on rank 0's clock, t1 and t2 on this
// rank's). Zero when there is no fresh sample.
struct ClockEcho {
  int64_t t0 = 0, t1 = 0, t2 = 0;
};

// Everything a worker rank sends rank 0 in one message.
struct WorkerMessage {
  std::vector<Request> requests;  // in full: first negotiations, changed or uncacheable tensors
  // Requests that match the response cache (negotiation/response_cache.h): the cache id and the
  // ready time (submitting rank's clock) only, 12 bytes each on the wire. Parallel vectors.
  std::vector<uint32_t> cached_ids;
  std::vector<int64_t> cached_ready_ns;
  // How many cache evictions (ResponseList::cache_evicted) this rank had applied when it sent
  // this: tells rank 0 whether an evicted id was still valid when the rank used it.
  uint64_t evictions_seen = 0;
  std::vector<timeline::Record> records;  // this rank's timeline records, on its own clock
  // Region names this rank had not sent yet, in the order of its ids (1, 2, ...): its region
  // records name regions by these ids. And the regions it has dropped so far (a full log).
  std::vector<std::string> region_names;
  uint64_t regions_dropped = 0;
  ClockEcho clock;
  bool shutdown = false;      // this rank called shutdown()
  std::string shutdown_why;   // how it ended, e.g. "exited without calling ranktime::shutdown()"
  bool final = false;         // this rank has left its loop: last message it sends
  bool timeline_ack = false;  // this rank has stopped its timeline; `records` are its last
};

// One unit of work every rank executes in the same order: a single tensor or a fused batch.
struct Response {
  OpType op = OpType::kAllreduce;
  ReduceOp reduce_op = ReduceOp::kSum;
  DataType dtype = DataType::kFloat32;
  int32_t device = kCpuDevice;
  int32_t root = 0;
  std::vector<std::string> names;
  std::vector<uint32_t> tensor_ids;  // timeline ids, parallel to names
  // Response cache ids, parallel to names (empty or 0: not cached; the rank forgets the name).
  std::vector<uint32_t> cache_ids;
  // Allgather: first dimension of each rank's input, per tensor: first_dims[t * size + r] (a
  // group's fused allgather holds several tensors).
  std::vector<int64_t> first_dims;
  uint8_t flags = 0;
  std::string argument;
  std::string error;  // non-empty: every listed tensor fails with this message
  // Only the set's members execute it, over the set's communicator; `root` is then the root's
  // rank within the set. 0: every rank.
  int32_t process_set = 0;
  // Elements of each tensor, parallel to names: set while a rank has joined (kJoin), which has
  // no tensors of its own and takes part in an allreduce with zeros of these sizes.
  std::vector<int64_t> tensor_sizes;
};

struct ResponseList {
  std::vector<Response> responses;
  int64_t sent_ns = 0;  // rank 0's clock when sent (t0 of ClockEcho)
  int64_t cycle = 0;
  bool shutdown = false;
  // The shutdown involves a rank that may never answer again (a stall, a lost peer): the job
  // is doomed and ends by abort, not by a collective finalisation, unless after a stall every
  // rank reaches its exit in time (backends/mpi/job_abort.h).
  bool fatal = false;
  // ... because of a stall: the ranks are alive, so a doomed exit waits for them (job_abort.h).
  bool stall = false;
  std::string shutdown_reason;
  // Cache ids rank 0 dropped (capacity), applied after the responses' cache_ids.
  std::vector<uint32_t> cache_evicted;
  // Whose processing lanes the timeline now wants (TIMELINE_RANKS=slowest:K chose again), rank 0
  // first; empty: as before. A rank not listed stops recording its lanes
  // (inspection/lane_choice.h).
  std::vector<int32_t> lane_ranks;
};

}  // namespace ranktime
