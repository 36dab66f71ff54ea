// The public C++ API of ranktime: the one header a user includes.
// Collectives are asynchronous: each call queues a request and returns a Handle at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ranktime {

// Element types. The numeric values travel on the wire: append, never reorder.
enum class DataType : uint8_t {
  kUInt8 = 0,
  kInt8 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kFloat16 = 4,
  kBFloat16 = 5,
  kFloat32 = 6,
  kFloat64 = 7,
  kInt16 = 8,
};
inline constexpr int kNumDataTypes = 9;

// Reductions. Average on integer types is the sum divided by size(), truncated toward zero.
// kAdasum: Horovod's adaptive summation (core/adasum.h); floating-point host tensors, a power of
// two ranks.
enum class ReduceOp : uint8_t {
  kSum = 0,
  kAverage = 1,
  kMin = 2,
  kMax = 3,
  kProduct = 4,
  kAdasum = 5
};
inline constexpr int kNumReduceOps = 6;

size_t dtype_size(DataType dtype);
const char* dtype_name(DataType dtype);  // "float32", "bfloat16", ...
std::optional<DataType> parse_dtype(std::string_view name);
const char* reduce_op_name(ReduceOp op);  // "sum", "average", ...

// Where a tensor's memory lives: kCpuDevice for host memory, otherwise a CUDA device ordinal.
inline constexpr int kCpuDevice = -1;

// A non-owning view of the caller's tensor. The memory must stay valid until the handle completes.
struct TensorView {
  void* data = nullptr;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  int device = kCpuDevice;
  // Optional cudaEvent_t that marks when a device tensor's data is ready (GPU path only).
  void* ready_event = nullptr;

  int64_t num_elements() const;  // product of shape; 1 for a scalar (empty shape)
  size_t num_bytes() const;
};

// The outcome of an operation. An error message names the tensor, the ranks and what differed.
class Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message), false); }
  // The submission was refused because an operation of the same name is still in flight on this
  // rank; its handle completes at once (Python raises at the call, as Horovod does).
  static Status NameInFlight(std::string message) {
    Status s(std::move(message), false);
    s.name_in_flight_ = true;
    return s;
  }
  // The call's own arguments are wrong (alltoall splits that do not fit the tensor, a scalar to
  // reducescatter, ...): the handle completes at once with this status (Python raises a
  // ValueError at the call, as Horovod does); the other ranks' handles for the tensor fail too.
  static Status InvalidArgument(std::string message) {
    Status s(std::move(message), false);
    s.invalid_argument_ = true;
    return s;
  }
  bool ok() const { return ok_; }
  bool name_in_flight() const { return name_in_flight_; }
  bool invalid_argument() const { return invalid_argument_; }
  const std::string& message() const { return message_; }

 private:
  Status(std::string message, bool ok) : message_(std::move(message)), ok_(ok) {}
  std::string message_;
  bool ok_ = true;
  bool name_in_flight_ = false;
  bool invalid_argument_ = false;
};

// Thrown for misuse that cannot be tied to one tensor: bad configuration, use before init().
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
struct HandleState;
}

// Completion of one asynchronous operation.
class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<detail::HandleState> state) : state_(std::move(state)) {}

  // Blocks (without spinning) until the operation completes; returns its status.
  Status wait() const;
  // True once the operation has completed, successfully or not.
  bool ready() const;
  // Allgather, reducescatter and alltoall: the result's bytes and shape (the input is not
  // changed). Valid once wait() has returned an ok status.
  const std::vector<std::byte>& output() const;
  const std::vector<int64_t>& output_shape() const;
  // Alltoall only: how many rows of output() came from each rank, in rank order.
  const std::vector<int32_t>& received_splits() const;

  bool valid() const { return state_ != nullptr; }

 private:
  std::shared_ptr<detail::HandleState> state_;
};

// Starts the runtime on every rank (collective). Initialises MPI if the caller has not.
// Throws ranktime::Error with the variable and value when the environment is malformed.
void init();
// Stops the runtime (any rank's shutdown stops all ranks); pending operations fail.
// init() may be called again afterwards.
void shutdown();
bool is_initialized();

int rank();
int size();
int local_rank();  // among the ranks on this host
int local_size();
// Among the ranks with this local rank (one per host): with as many ranks on every host, this
// host's index and the number of hosts.
int cross_rank();
int cross_size();

// Process sets (Horovod's): a collective runs over every rank (kGlobalProcessSet), or over the
// ranks of a set added with add_process_set(); only they submit it, and names are per set.
inline constexpr int kGlobalProcessSet = 0;

// In place: `tensor` holds the reduction of every rank's tensor when the handle completes.
Handle allreduce_async(const TensorView& tensor, const std::string& name,
                       ReduceOp op = ReduceOp::kSum, int process_set = kGlobalProcessSet);
// Concatenates every rank's tensor along dimension 0 (which may differ between ranks) into
// handle.output(). Dimensions after the first must agree.
Handle allgather_async(const TensorView& tensor, const std::string& name,
                       int process_set = kGlobalProcessSet);
// In place: every rank's `tensor` receives root_rank's contents. root_rank is a global rank,
// also in a process set (as in Horovod).
Handle broadcast_async(const TensorView& tensor, int root_rank, const std::string& name,
                       int process_set = kGlobalProcessSet);
// Reduces every rank's `tensor` (the same shape on every rank, at least one dimension) and
// splits the result along dimension 0 among the ranks into handle.output(): rank r gets
// dim0 / size() rows, and the first dim0 % size() ranks one row more (Horovod's split), in rank
// order. Average divides once, after the reduction. In a process set, its members share the
// rows (size() and rank order are the set's).
Handle reducescatter_async(const TensorView& tensor, const std::string& name,
                           ReduceOp op = ReduceOp::kSum, int process_set = kGlobalProcessSet);
// Sends splits[r] rows (dimension 0) of `tensor` to rank r, in rank order, and receives into
// handle.output() the rows every rank sent this one, in rank order; handle.received_splits() says
// how many came from each. Empty `splits`: dim0 / size() rows to each rank (dim0 must divide).
// As in Horovod, the splits may sum to less than dim0 (the rows after them are not sent), never
// to more. Dimensions after the first must agree between ranks; dimension 0 may differ. In a
// process set, r is the rank within the set and there is one split per member.
Handle alltoall_async(const TensorView& tensor, const std::vector<int32_t>& splits,
                      const std::string& name, int process_set = kGlobalProcessSet);

// Synchronous: the same as allreduce_async(...).wait() and broadcast_async(...).wait(), except
// that the calling thread does ranktime's work for the call itself while the other ranks answer
// within RANKTIME_SPIN_US, instead of handing it to the background thread and sleeping until
// woken (a small allreduce takes about half the time; docs/architecture.md, "Synchronous
// calls"). barrier() works this way too. If a peer hangs inside the collective, the call does not
// return: the watchdog (RANKTIME_PEER_TIMEOUT_S) still gives up and ends the job.
Status allreduce(const TensorView& tensor, const std::string& name, ReduceOp op = ReduceOp::kSum,
                 int process_set = kGlobalProcessSet);
Status broadcast(const TensorView& tensor, int root_rank, const std::string& name,
                 int process_set = kGlobalProcessSet);

// Grouped operations: the tensors of a group are negotiated together (the group is ready when
// every tensor is ready on every rank) and run as one fused collective per dtype; a problem with
// any tensor fails every tensor of the group on every rank, with a message naming the tensor.
// Tensor i is named `name_<i+1>of<n>` (Horovod's names). One handle per tensor, in order; they
// complete together. Results as for the single operations (allreduce in place; allgather and
// reducescatter in each handle's output()).
std::vector<Handle> grouped_allreduce_async(const std::vector<TensorView>& tensors,
                                            const std::string& name, ReduceOp op = ReduceOp::kSum,
                                            int process_set = kGlobalProcessSet);
std::vector<Handle> grouped_allgather_async(const std::vector<TensorView>& tensors,
                                            const std::string& name,
                                            int process_set = kGlobalProcessSet);
std::vector<Handle> grouped_reducescatter_async(const std::vector<TensorView>& tensors,
                                                const std::string& name,
                                                ReduceOp op = ReduceOp::kSum,
                                                int process_set = kGlobalProcessSet);

// Blocks until every rank (of the process set) has called barrier().
Status barrier(int process_set = kGlobalProcessSet);

// Adds a process set of these global ranks (any order; each once) and returns its id (> 0; ids
// are never reused). Collective: every rank calls it, with the same ranks, members or not, in the
// same order as its other add/remove calls. Throws Error when the ranks are invalid or a set
// with the same ranks exists (the message says which).
int add_process_set(std::vector<int> ranks);
// Removes a process set (collective, like add_process_set()); its operations still in flight
// fail with an error naming the set. False (and nothing happens) for kGlobalProcessSet or an id
// that is not a set.
bool remove_process_set(int process_set);
// The sets that exist, kGlobalProcessSet first; a set's ranks (ascending), this rank's place in
// it (-1 when not a member) and its size. Throw Error for an id that is not a set.
std::vector<int> process_set_ids();
std::vector<int> process_set_ranks(int process_set);
int process_set_rank(int process_set);
int process_set_size(int process_set);
bool process_set_included(int process_set);

// Horovod's join: this rank has no more data. Until every rank has joined, it takes part in the
// other ranks' allreduces with zeros (an average still divides by size(); for device tensors
// the zeros are made on the GPU), and their allgathers, broadcasts,
// reducescatters and alltoalls fail (Horovod's rule); returns once every rank has joined, with
// the rank that joined last in *last_joined_rank. `device` is accepted for Horovod's signature
// (it does not choose where the zeros are made). Over every rank only: a process set's
// operations still need all members.
Status join(int device = kCpuDevice, int* last_joined_rank = nullptr);

// Timeline control at run time. Collective: every rank calls it; the change takes effect on all
// ranks at the same point of the response stream. Starting with a new path writes a new file.
Status start_timeline(const std::string& path, bool mark_cycles = false);
Status stop_timeline();

// Marks the start of a training step on this rank (every rank calls it at the start of each
// step): `step` or, without one, the step after this rank's last (from 0). The marks become
// STEP slices on rank 0's timeline (thread `steps rank r`), and TIMELINE_STEPS windows count
// these steps. Cheap (no communication) and never fails; a no-op before init().
void mark_step(std::optional<int64_t> step = std::nullopt);

// Regions: named parts of this rank's own work in a step ("data", "forward", "backward",
// "optimizer", ...), recorded against this rank's clock and written in rank 0's timeline as slices
// on the `regions` thread of the rank's process (`rank R`), with `blocked_us`: the time the thread
// spent blocked inside ranktime (waiting for other ranks) during the region. Regions nest, per
// thread: an end must name the innermost region open on the calling thread. Names are the user's
// text (any bytes; not empty). Recorded while the timeline is on (TIMELINE_STEPS and
// TIMELINE_RANKS apply as to processing lanes); a no-op for the trace otherwise, the nesting is
// still checked. GPU builds also push an NVTX range of the same name.
// Throws Error for an empty name.
void region_begin(std::string_view name);
// Throws Error, naming the region and the rank, when `name` is not the innermost region open on
// this thread (never begun, begun on another thread, or a region begun inside it is still open).
void region_end(std::string_view name);

// A region for the lifetime of the object: `ranktime::Region r("data");`.
class Region {
 public:
  explicit Region(std::string_view name) : name_(name) { region_begin(name_); }
  // Ends the region; a mismatch (a region_end() of it meanwhile) is logged, not thrown.
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

 private:
  std::string name_;
};

namespace detail {
// Marks a span of time in which the calling thread is blocked inside ranktime, waiting for other
// ranks (Handle::wait(), the torch backend's wait): regions leave it out of their own time.
// Nested scopes on one thread count once.
class BlockedScope {
 public:
  BlockedScope();
  ~BlockedScope();
  BlockedScope(const BlockedScope&) = delete;
  BlockedScope& operator=(const BlockedScope&) = delete;

 private:
  int64_t start_ns_ = 0;
};
// Nanoseconds this thread has spent in BlockedScopes so far.
int64_t thread_blocked_ns();
}  // namespace detail

// How late each rank was behind the first rank to become ready, over the negotiations rank 0
// has seen (a sliding window, plus totals since start). Kept whether or not the timeline is on.
struct RankLateness {
  int rank = 0;
  std::string hostname;
  // Negotiations this rank took part in (a process set's count for its members only; not
  // join, while it had joined): since start, and in the window (the last 200 of them).
  uint64_t negotiations = 0;       // since start
  uint64_t times_last = 0;         // since start: negotiations this rank was the last to be ready
  uint64_t window = 0;             // negotiations in the window
  uint64_t window_times_last = 0;  // ... of which this rank was last
  double mean_lag_us = 0, median_lag_us = 0, p95_lag_us = 0, max_lag_us = 0;  // over the window
  // What its lateness cost: how much sooner the steps would have completed had this rank been no
  // later than the other ranks' median for every tensor (each step replayed as `ranktime
  // summary` does, from every rank's readiness and rank 0's batch times; a tensor's n-th
  // negotiation is step n). Since start, and the mean per step over the last 100 steps.
  double cost_us = 0;
  double cost_per_step_us = 0;
};
// The statistics as rank 0 holds them. On other ranks the list is empty: only rank 0 sees every
// rank's readiness.
std::vector<RankLateness> lateness();

}  // namespace ranktime
