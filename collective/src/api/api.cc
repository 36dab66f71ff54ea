// The public API (ranktime.h): the one process-wide runtime handle and thin wrappers over it.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "backends/factory.h"
#include "backends/mpi/job_abort.h"
#include "backends/mpi/mpi_world.h"
#include "core/config.h"
#include "core/log.h"
#include "core/wire.h"
#include "ranktime/clock_ns.h"
#include "recording/region_stack.h"
#include "runtime/runtime.h"

namespace ranktime {
namespace {

std::mutex g_mutex;
std::unique_ptr<Runtime> g_runtime;
bool g_we_initialized_mpi = false;

// Shuts `r` down. A runtime whose background thread is stuck in a collective that will never
// return is leaked: that thread still uses it. So is a doomed one: freeing its communicators
// could wait for the rank it gave up on, and the job is being aborted anyway (job_abort.h).
void retire(std::unique_ptr<Runtime> r, const std::string& why) {
  if (!r) return;
  for (const std::string& name : open_regions_everywhere()) {
    RANKTIME_LOG(kWarning, "region \"" << name << "\" is still open at shutdown on rank "
                                       << r->rank() << "; it is left out of the timeline");
  }
  r->shutdown(why);
  if (r->hung() || r->doomed()) {
    r.release();
  } else {
    r.reset();
  }
}

std::unique_ptr<Runtime> take_runtime() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return std::move(g_runtime);
}

// A process that exits without shutdown() still tells the other ranks (their pending operations
// fail with a message saying so instead of hanging), and finalises MPI if ranktime started it.
// A doomed job finalises only if every rank reached its exit (after a stall shutdown; otherwise
// MPI_Finalize would wait for the rank given up on): else the process waits for the abort that
// ends the job, whoever initialised MPI.
void shutdown_at_exit() {
  retire(take_runtime(), "exited without calling ranktime::shutdown()");
  if (job_doomed()) end_doomed_job();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g_we_initialized_mpi && !finalized) MPI_Finalize();
}

// RANKTIME_START_TIMEOUT_S (horovodrun's --start-timeout): init() must have met every rank in
// time. A rank waiting in MPI_Init for one that never came cannot raise, so this ends the
// process, which makes mpirun end the job.
class StartWatchdog {
 public:
  explicit StartWatchdog(double seconds) {
    if (seconds <= 0) return;
    thread_ = std::thread([this, seconds] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (done_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return met_; }))
        return;
      std::fprintf(stderr,
                   "ranktime::init(): not every rank started within RANKTIME_START_TIMEOUT_S=%g "
                   "s (HOROVOD_START_TIMEOUT, --start-timeout): ending the job\n",
                   seconds);
      std::fflush(stderr);
      std::_Exit(1);
    });
  }
  ~StartWatchdog() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      met_ = true;
    }
    done_.notify_all();
    thread_.join();
  }
  StartWatchdog(const StartWatchdog&) = delete;
  StartWatchdog& operator=(const StartWatchdog&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  bool met_ = false;
  std::thread thread_;
};

Runtime& runtime(const char* caller) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_runtime) {
    throw Error(std::string("ranktime::") + caller +
                " called while ranktime is not running: call ranktime::init() first");
  }
  return *g_runtime;
}

}  // namespace

void init() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_runtime) return;
  Config config;
  try {
    config = config_from_environment();
  } catch (const ConfigError& e) {
    throw Error(std::string("ranktime::init(): ") + e.what());
  }
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) throw Error("ranktime::init(): MPI has already been finalized in this process");
  if (job_doomed()) {
    throw Error(
        "ranktime::init(): an earlier runtime in this process gave up on another rank (a stall "
        "shutdown or a lost peer); the job is being aborted");
  }
  const StartWatchdog watchdog(config.start_timeout_s);  // until the runtime has met every rank
  if (!initialized) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    g_we_initialized_mpi = true;
  } else {
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE) {
      throw Error("ranktime::init(): MPI was initialised with thread level " +
                  std::to_string(provided) +
                  "; ranktime's background thread needs MPI_THREAD_MULTIPLE");
    }
  }
  try {
    g_runtime = std::make_unique<Runtime>(config, std::make_unique<MpiWorld>(config.status_file));
  } catch (const ConfigError& e) {  // a setting the job's size rules out (TIMELINE_RANKS)
    throw Error(std::string("ranktime::init(): ") + e.what());
  }
  static bool registered = false;
  if (!registered) {
    registered = true;
    std::atexit(shutdown_at_exit);
  }
}

void shutdown() {
  // Joins the background thread; MPI stays up so that init() may run again.
  retire(take_runtime(), "called shutdown()");
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_runtime != nullptr;
}

int rank() { return runtime("rank()").rank(); }
int size() { return runtime("size()").size(); }
int local_rank() { return runtime("local_rank()").local_rank(); }
int local_size() { return runtime("local_size()").local_size(); }
int cross_rank() { return runtime("cross_rank()").cross_rank(); }
int cross_size() { return runtime("cross_size()").cross_size(); }

Handle allreduce_async(const TensorView& tensor, const std::string& name, ReduceOp op,
                       int process_set) {
  return runtime("allreduce_async()")
      .submit(OpType::kAllreduce, tensor, name, op, 0, {}, 0, process_set);
}

Handle allgather_async(const TensorView& tensor, const std::string& name, int process_set) {
  return runtime("allgather_async()")
      .submit(OpType::kAllgather, tensor, name, ReduceOp::kSum, 0, {}, 0, process_set);
}

Handle broadcast_async(const TensorView& tensor, int root_rank, const std::string& name,
                       int process_set) {
  return runtime("broadcast_async()")
      .submit(OpType::kBroadcast, tensor, name, ReduceOp::kSum, root_rank, {}, 0, process_set);
}

Status allreduce(const TensorView& tensor, const std::string& name, ReduceOp op, int process_set) {
  return runtime("allreduce()").run(OpType::kAllreduce, tensor, name, op, 0, process_set);
}

Status broadcast(const TensorView& tensor, int root_rank, const std::string& name,
                 int process_set) {
  return runtime("broadcast()")
      .run(OpType::kBroadcast, tensor, name, ReduceOp::kSum, root_rank, process_set);
}

Handle reducescatter_async(const TensorView& tensor, const std::string& name, ReduceOp op,
                           int process_set) {
  return runtime("reducescatter_async()")
      .submit(OpType::kReducescatter, tensor, name, op, 0, {}, 0, process_set);
}

Handle alltoall_async(const TensorView& tensor, const std::vector<int32_t>& splits,
                      const std::string& name, int process_set) {
  return runtime("alltoall_async()").submit_alltoall(tensor, splits, name, process_set);
}

namespace {
std::vector<Handle> submit_group(const char* caller, OpType op,
                                 const std::vector<TensorView>& tensors, const std::string& name,
                                 ReduceOp reduce_op, int process_set) {
  if (tensors.empty()) {
    throw Error(std::string("ranktime::") + caller + ": group '" + name + "' has no tensors");
  }
  return runtime(caller).submit_group(op, tensors, name, reduce_op, process_set);
}
}  // namespace

std::vector<Handle> grouped_allreduce_async(const std::vector<TensorView>& tensors,
                                            const std::string& name, ReduceOp op, int process_set) {
  return submit_group("grouped_allreduce_async()", OpType::kAllreduce, tensors, name, op,
                      process_set);
}

std::vector<Handle> grouped_allgather_async(const std::vector<TensorView>& tensors,
                                            const std::string& name, int process_set) {
  return submit_group("grouped_allgather_async()", OpType::kAllgather, tensors, name,
                      ReduceOp::kSum, process_set);
}

std::vector<Handle> grouped_reducescatter_async(const std::vector<TensorView>& tensors,
                                                const std::string& name, ReduceOp op,
                                                int process_set) {
  return submit_group("grouped_reducescatter_async()", OpType::kReducescatter, tensors, name, op,
                      process_set);
}

Status barrier(int process_set) {
  return runtime("barrier()")
      .run(OpType::kBarrier, TensorView{}, "ranktime.barrier", ReduceOp::kSum, 0, process_set);
}

int add_process_set(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  Handle handle = runtime("add_process_set()")
                      .submit(OpType::kAddProcessSet, TensorView{}, "ranktime.process_set",
                              ReduceOp::kSum, 0, ranks_argument(ranks));
  Status status = handle.wait();
  if (!status.ok()) throw Error(status.message());
  return static_cast<int>(handle.output_shape().at(0));
}

bool remove_process_set(int process_set) {
  Runtime& r = runtime("remove_process_set()");
  std::vector<int> ranks;
  if (process_set == kGlobalProcessSet || !r.process_sets().ranks(process_set, &ranks)) {
    return false;
  }
  Status status = r.submit(OpType::kRemoveProcessSet, TensorView{}, "ranktime.process_set",
                           ReduceOp::kSum, 0, std::to_string(process_set))
                      .wait();
  if (!status.ok()) throw Error(status.message());
  return true;
}

std::vector<int> process_set_ids() { return runtime("process_set_ids()").process_sets().ids(); }

std::vector<int> process_set_ranks(int process_set) {
  std::vector<int> ranks;
  if (!runtime("process_set_ranks()").process_sets().ranks(process_set, &ranks)) {
    throw Error("process set " + std::to_string(process_set) +
                " does not exist (never added, or removed)");
  }
  return ranks;
}

int process_set_rank(int process_set) {
  const std::vector<int> ranks = process_set_ranks(process_set);
  auto it = std::lower_bound(ranks.begin(), ranks.end(), rank());
  return it != ranks.end() && *it == rank() ? static_cast<int>(it - ranks.begin()) : -1;
}

int process_set_size(int process_set) {
  return static_cast<int>(process_set_ranks(process_set).size());
}

bool process_set_included(int process_set) { return process_set_rank(process_set) >= 0; }

Status join(int device, int* last_joined_rank) {
  if (device < kCpuDevice) {
    return Status::Error("join(): device " + std::to_string(device) + " is not a device");
  }
  Handle handle = runtime("join()").submit(OpType::kJoin, TensorView{}, "ranktime.join");
  Status status = handle.wait();
  if (status.ok() && last_joined_rank != nullptr) {
    *last_joined_rank = static_cast<int>(handle.output_shape().at(0));
  }
  return status;
}

void mark_step(std::optional<int64_t> step) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_runtime) g_runtime->mark_step(step);
}

namespace {

// "ranktime::region_end("data") on rank 1: <why>": what a region error says.
std::string region_error(const char* caller, std::string_view name, const std::string& why) {
  std::string where;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    where =
        g_runtime ? " on rank " + std::to_string(g_runtime->rank()) : " (ranktime is not running)";
  }
  return std::string("ranktime::") + caller + "(\"" + std::string(name) + "\")" + where + ": " +
         why;
}

}  // namespace

void region_begin(std::string_view name) {
  if (name.empty()) throw Error(region_error("region_begin", name, "a region needs a name"));
  if (name.size() > kMaxNameBytes) {
    throw Error(region_error("region_begin", name.substr(0, 64),
                             "the name has " + std::to_string(name.size()) + " bytes; at most " +
                                 std::to_string(kMaxNameBytes)));
  }
  const int64_t blocked_ns = detail::thread_blocked_ns();
  int64_t begin_ns = 0;
  int64_t step = -1;
  bool recorded = false;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_runtime) {
      begin_ns = g_runtime->now_ns();
      step = g_runtime->current_step();
      recorded = true;
    }
  }
  device_range_begin(this_thread_regions().push(name, begin_ns, blocked_ns, step, recorded));
}

void region_end(std::string_view name) {
  thread_local OpenRegion ended;
  RegionStack& stack = this_thread_regions();
  std::string why = stack.pop(name, &ended);
  if (!why.empty()) {
    if (!stack.contains(name) && region_open_on_other_thread(name))
      why = "it was begun on another thread; a region ends on the thread that began it";
    throw Error(region_error("region_end", name, why));
  }
  device_range_end();
  if (!ended.recorded) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_runtime) return;
  for (const std::string& outer :
       stack.hold({ended.name, ended.step, ended.begin_ns, g_runtime->now_ns(),
                   detail::thread_blocked_ns() - ended.blocked_ns})) {
    RANKTIME_LOG(kWarning, "region \"" << outer << "\" on rank " << g_runtime->rank()
                                       << " holds more than " << RegionStack::kMaxHeld
                                       << " regions; it is left out of the timeline so that "
                                          "they can be written (regions are written in order)");
  }
  for (const ClosedRegion& r : stack.ready())
    g_runtime->region(r.name, r.step, r.begin_ns, r.end_ns, r.blocked_ns);
}

Region::~Region() {
  try {
    region_end(name_);
  } catch (const Error& e) {
    RANKTIME_LOG(kWarning, e.what());
  }
}
int64_t clock_ns() { return runtime("clock_ns()").now_ns(); }

std::vector<RankLateness> lateness() { return runtime("lateness()").lateness(); }

Status start_timeline(const std::string& path, bool mark_cycles) {
  return runtime("start_timeline()")
      .submit(OpType::kTimelineStart, TensorView{}, "ranktime.timeline", ReduceOp::kSum, 0, path,
              mark_cycles ? 1 : 0)
      .wait();
}

Status stop_timeline() {
  return runtime("stop_timeline()")
      .submit(OpType::kTimelineStop, TensorView{}, "ranktime.timeline")
      .wait();
}

}  // namespace ranktime
