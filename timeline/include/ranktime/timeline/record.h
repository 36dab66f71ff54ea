// Compact, fixed-size timeline records: what producers hand to the TraceWriter.
// Producers never format strings or allocate; the writer turns records into Chrome-trace JSON.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace ranktime::timeline {

// Every slice name the timeline can contain. Values travel between ranks inside record batches:
// append, never reorder.
enum class Phase : uint8_t {
  // Operation slices (top level on a `rank r` thread).
  kAllreduce,
  kAllgather,
  kBroadcast,
  kBarrier,
  // Negotiation slices (on the `negotiate` thread).
  kNegotiateAllreduce,
  kNegotiateAllgather,
  kNegotiateBroadcast,
  kNegotiateBarrier,
  // Sub-phases, nested in an operation slice.
  kQueue,
  kWaitForData,
  kWaitForOtherTensorData,
  kMemcpyInFusionBuffer,
  kMemcpyOutFusionBuffer,
  kMpiAllreduce,
  kMpiAllgather,
  kMpiBcast,
  kNcclAllreduce,
  kNcclAllgather,
  kNcclBcast,
  kNcclReducescatter,
  kNcclReduce,
  kMemcpyInHostBuffer,
  kMemcpyOutHostBuffer,
  kMpiReduce,  // host-aware allreduce: the reduction inside a host
  kReducescatter,
  kAlltoall,
  kNegotiateReducescatter,
  kNegotiateAlltoall,
  kMpiReducescatter,
  kMpiAlltoall,  // the exchange of row counts and the data itself
  // join (an operation slice and its negotiation: every rank's tick is when it joined).
  kJoin,
  kNegotiateJoin,
  // Adasum (recursive doubling): per level, the exchange of the whole buffer with the partner
  // rank, then the dot products, norms and scaled sum of the pair.
  kAdasumExchange,
  kAdasumCombine,
  kNcclAlltoall,  // an alltoall of device memory: grouped ncclSend/ncclRecv
  kCount
};

// "ALLREDUCE", "NEGOTIATE_ALLREDUCE", "MEMCPY_IN_FUSION_BUFFER", ...
const char* phase_name(Phase phase);

// Slices are written as complete ('X') events once their end is known: the writer holds a
// begin record (kOpBegin, kNegotiateBegin) and the records inside it until the record that ends
// it, on the same lane (tensor and rank) or the same tensor's negotiate thread.
enum class RecordKind : uint8_t {
  kOpBegin,         // begins an operation slice on lane `rank`; args.op
  kOpEnd,           // ends it; args.op.error_string != 0 adds an "error" arg
  kSpan,            // a leaf sub-phase from ts_ns to end_ns on lane `rank` (inside the open one)
  kNegotiateBegin,  // begins NEGOTIATE_<OP> on the negotiate thread
  kTick,            // readiness tick of one rank: zero-length 'X' named by the rank; args.tick
  kNegotiateEnd,    // ends NEGOTIATE_<OP>; args.negotiate
  kCycle,           // CYCLE_START instant on pid 0; args.cycle
  kInstant,         // a global instant on pid 0 (stall, dead rank); args.instant
  kCounter,         // a counter track sample on pid 0; args.counter
  // A fused batch executed on lane `rank`, in one record per tensor instead of one per event:
  // a kBatch, then its args.batch.spans kBatchSpan records, then one kBatchTensor per tensor,
  // in that order, in one push (a full buffer or outbox keeps a prefix, so a tensor record
  // never outlives its header). The writer gives each kBatchTensor its operation slice, and the
  // first one written in a file also the batch's sub-phases (QUEUE and the spans), which are the
  // same for every tensor of the batch.
  kBatch,        // ts_ns: the response's arrival; end_ns: the operation's end; args.batch
  kBatchSpan,    // a sub-phase of the lane's current batch, ts_ns to end_ns
  kBatchTensor,  // one tensor of the lane's current batch; args.op without fused_tensors/error
  // A whole NEGOTIATE_<OP> slice with every rank's tick, on the negotiate thread: ts_ns its
  // begin, end_ns its end; args.negotiation. For up to kMaxInlineTicks ranks; with more, a
  // negotiation is recorded as kNegotiateBegin, kTick per rank, kNegotiateEnd.
  kNegotiation,
  // One training step of rank `rank`: from its mark of step args.step.step (ts_ns) to its next
  // mark (end_ns), both on rank 0's clock; a STEP slice on pid 0, thread `steps rank r`.
  kStep,
  // One region of rank `rank` (ranktime::Region): from ts_ns to end_ns, on rank 0's clock;
  // args.region. A slice on the `regions` thread of the rank's own process (trace_names.h).
  kRegion,
};
inline constexpr RecordKind kLastRecordKind = RecordKind::kRegion;

// Whether a record of this kind carries a timestamp in end_ns (converted between clocks too).
inline bool has_end_ns(RecordKind kind) {
  return kind == RecordKind::kSpan || kind == RecordKind::kBatch ||
         kind == RecordKind::kBatchSpan || kind == RecordKind::kNegotiation ||
         kind == RecordKind::kStep || kind == RecordKind::kRegion;
}

inline constexpr int kMaxInlineDims = 8;

struct OpArgs {
  uint8_t dtype;           // ranktime::DataType value
  uint8_t ndim;            // number of dims; dims beyond kMaxInlineDims are not kept
  uint16_t fused_tensors;  // tensors in the fused batch, this one included (1 = not fused)
  uint32_t error_string;   // StringTable id of an error message, 0 when none
  int64_t bytes;
  int64_t dims[kMaxInlineDims];
};

struct BatchArgs {
  uint16_t spans;          // kBatchSpan records that follow
  uint16_t fused_tensors;  // tensors executed together (the fused_tensors arg)
  uint32_t error_string;   // StringTable id of an error message, 0 when none
  int64_t start_ns;        // execution start: the end of QUEUE
};

struct TickArgs {
  int32_t rank;
  int64_t lag_ns;  // behind the first rank to become ready (written as "lag_us")
};

struct NegotiateEndArgs {
  int32_t last_rank;
  uint32_t error_string;  // StringTable id of an error message (mismatch), 0 when none
  int64_t spread_ns;      // last rank's readiness minus first rank's (written as "spread_us")
};

inline constexpr int kMaxInlineTicks = 6;

// Where a rank's readiness tick goes in a NEGOTIATE_<OP> slice from begin_ns to end_ns: at its
// readiness, moved inside the slice when clock-offset uncertainty puts it outside. Inside means
// before the end (1 ns before, at the latest), since Perfetto takes a slice's end as outside it.
inline int64_t tick_ns(int64_t ready_ns, int64_t begin_ns, int64_t end_ns) {
  return std::min(std::max(ready_ns, begin_ns), std::max(begin_ns, end_ns - 1));
}

// The writer derives the rest: each tick at tick_ns(ready_ns[i], ts_ns, end_ns) with lag
// ready_ns[i] - ready_ns[0]; last_rank and spread from the last tick.
struct NegotiationArgs {
  uint32_t error_string;  // StringTable id of an error message (mismatch), 0 when none
  uint16_t ticks;         // ranks, in readiness order
  uint16_t reserved;
  int32_t rank[kMaxInlineTicks];
  int64_t ready_ns[kMaxInlineTicks];  // when the rank became ready (rank 0's clock), unclamped
};

struct CycleArgs {
  int64_t cycle;
};

struct InstantArgs {
  uint32_t name_string;     // StringTable id of the event name, e.g. "STALL"
  uint32_t message_string;  // StringTable id of a message
};

struct StepArgs {
  int64_t step;  // the step's number (from 0 in a run, or the caller's)
};

struct RegionArgs {
  uint32_t name_string;  // StringTable id of the region's name (the user's text)
  uint32_t reserved;
  int64_t blocked_ns;  // time the thread was blocked inside ranktime during it (a duration)
};

struct CounterArgs {
  uint32_t name_string;  // StringTable id of the counter track's name
  int32_t series;        // series index, written as arg "rank <series>"
  double value;
};

// One timeline record. Timestamps are nanoseconds on rank 0's clock (already converted from the
// recording rank's clock), in the same time base as the writer's run start.
struct Record {
  int64_t ts_ns = 0;
  int64_t end_ns = 0;   // see has_end_ns()
  uint32_t tensor = 0;  // tensor id from the StringTable (its name); pid is tensor + 1
  int16_t rank = 0;     // lane: thread 1 + rank on the tensor's process (kStep: the marking rank)
  RecordKind kind = RecordKind::kSpan;
  Phase phase = Phase::kQueue;
  union {
    OpArgs op;
    BatchArgs batch;
    TickArgs tick;
    NegotiateEndArgs negotiate;
    NegotiationArgs negotiation;
    CycleArgs cycle;
    InstantArgs instant;
    CounterArgs counter;
    StepArgs step;
    RegionArgs region;
  } args{};
};
static_assert(std::is_trivially_copyable_v<Record>, "records are shipped between ranks as bytes");
static_assert(sizeof(NegotiationArgs) <= sizeof(OpArgs), "inline ticks must not grow Record");

// The record of one step of `rank`, from `begin_ns` (its mark of step `step`) to `end_ns` (its
// next mark, or the end of the run), on rank 0's clock.
inline Record step_record(int16_t rank, int64_t step, int64_t begin_ns, int64_t end_ns) {
  Record r;
  r.kind = RecordKind::kStep;
  r.rank = rank;
  r.ts_ns = begin_ns;
  r.end_ns = end_ns;
  r.args.step.step = step;
  return r;
}

// The record of one region of `rank` named by string `name`, from `begin_ns` to `end_ns` on
// rank 0's clock, during which the thread was blocked inside ranktime for `blocked_ns`.
inline Record region_record(int16_t rank, uint32_t name, int64_t begin_ns, int64_t end_ns,
                            int64_t blocked_ns) {
  Record r;
  r.kind = RecordKind::kRegion;
  r.rank = rank;
  r.ts_ns = begin_ns;
  r.end_ns = end_ns;
  r.args.region.name_string = name;
  r.args.region.blocked_ns = blocked_ns;
  return r;
}

}  // namespace ranktime::timeline
