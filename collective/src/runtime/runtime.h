// The runtime of one rank: the queue user threads submit to, and the background thread that
// negotiates with rank 0, executes the agreed responses on a backend and completes the handles.
//
// Protocol (over the World's ControlChannel):
//   other ranks -> rank 0: WorkerMessage when they have new requests, timeline records to ship,
//                          or a shutdown to announce;
//   rank 0 -> other ranks: ResponseList whenever tensors became ready on every rank.
// Every rank executes every ResponseList, in the order rank 0 sent them.
//
// One tensor's way through the rooms: submit() -> SubmissionQueue (submission_queue.h) ->
// worker_step() sends its Request -> rank 0's coordinator_step(): Coordinator
// (negotiation/coordinator.h: validation, fusion plan) -> ResponseList back -> execute() ->
// Backend::enqueue (backends/) -> deliver(): TimelineRecorder (recording/) and complete().
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backends/backend.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/tensor_entry.h"
#include "inspection/inspector.h"
#include "live/live_monitor.h"
#include "negotiation/coordinator.h"
#include "negotiation/response_cache.h"
#include "recording/timeline_recorder.h"
#include "runtime/control_messages.h"
#include "runtime/join_zeros.h"
#include "runtime/liveness.h"
#include "runtime/process_set_registry.h"
#include "runtime/rendezvous.h"
#include "runtime/signals.h"
#include "runtime/submission_queue.h"
#include "runtime/world.h"

namespace ranktime {

class Runtime {
 public:
  // Collective over the ranks of `world`: every rank constructs its Runtime at the same time.
  Runtime(const Config& config, std::unique_ptr<World> world);
  ~Runtime();  // shutdown()
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int rank() const { return placement_.rank; }
  int size() const { return placement_.size; }
  int local_rank() const { return placement_.local_rank; }
  int local_size() const { return placement_.local_size; }
  int cross_rank() const { return placement_.cross_rank; }
  int cross_size() const { return placement_.cross_size; }

  // Queues one request; never blocks on the network. `process_set`: the set it runs over
  // (its tensor is then named per set_tensor_name()). `wake_loop` false: run() runs the steps.
  Handle submit(OpType op, const TensorView& view, const std::string& name,
                ReduceOp reduce_op = ReduceOp::kSum, int root = 0, std::string argument = {},
                uint8_t flags = 0, int32_t process_set = kGlobalSet, bool wake_loop = true);
  // Synchronous: submit() then wait for the handle, running the loop's steps on this thread
  // while they make progress (within RANKTIME_SPIN_US of the last), instead of waking the
  // background thread and sleeping until it wakes this one: a small collective saves two thread
  // handoffs. Then, or when another thread is running them, the background thread takes over.
  Status run(OpType op, const TensorView& view, const std::string& name,
             ReduceOp reduce_op = ReduceOp::kSum, int root = 0, int32_t process_set = kGlobalSet);
  // An alltoall sending splits[r] rows to rank r of the set (empty: an equal split).
  Handle submit_alltoall(const TensorView& view, std::vector<int32_t> splits,
                         const std::string& name, int32_t process_set = kGlobalSet);
  // A group (allreduce, allgather or reducescatter; see ranktime.h): tensor i is named
  // `name_<i+1>of<n>`; queued all together or not at all.
  std::vector<Handle> submit_group(OpType op, const std::vector<TensorView>& views,
                                   const std::string& name, ReduceOp reduce_op = ReduceOp::kSum,
                                   int32_t process_set = kGlobalSet);

  // Any thread: the process sets (queries; changes go through submit()).
  const ProcessSetRegistry& process_sets() const { return sets_; }

  // Announces shutdown to every rank (with `why`, e.g. "called shutdown()") and waits for the
  // background thread to finish.
  void shutdown(const std::string& why = "called shutdown()");

  // Any thread: this rank starts a training step (see ranktime::mark_step()).
  void mark_step(std::optional<int64_t> step) { timeline_->mark_step(step, clock_.now_ns()); }
  // Any thread: regions (see ranktime::region_begin()), timed with now_ns() and recorded once
  // they have ended (TimelineRecorder::region()).
  int64_t now_ns() const { return clock_.now_ns(); }
  int64_t current_step() const { return timeline_->current_step(); }
  void region(std::string_view name, int64_t step, int64_t begin_ns, int64_t end_ns,
              int64_t blocked_ns) {
    timeline_->region(name, step, begin_ns, end_ns, blocked_ns);
  }

  // Rank 0: per-rank lateness statistics; other ranks: empty.
  std::vector<RankLateness> lateness() const;

  // This runtime gave up on a peer (RANKTIME_PEER_TIMEOUT_S): a rank stopped sending heartbeats,
  // or a collective never returned. MPI must then not be finalised (it would wait for the dead).
  bool peer_lost() const { return liveness_->peer_lost(); }
  // The background thread is stuck in a collective the watchdog gave up on: shutdown() returns
  // without it, and the Runtime must be leaked, not destroyed (the thread still uses it).
  bool hung() const { return liveness_->hung(); }
  // This runtime gave up because of another rank (see World::doom): the process must not
  // finalise MPI, and the Runtime is leaked, not destroyed (its world's communicators stay).
  bool doomed() const { return doomed_; }

 private:
  // Background thread: the loop, rank 0's and the other ranks' step, execution and completion.
  void loop();
  bool step();  // one pass of the loop: true on progress
  // run(): this thread runs the steps until `handle` completes or nothing progresses for the spin.
  void run_steps_until(const Handle& handle);
  bool coordinator_step();
  bool worker_step();
  void execute(const ResponseList& list, int64_t arrival_ns);
  void complete(TensorEntry* entry, const Status& status);

  void execute_control(const Response& response, const std::vector<TensorEntry*>& entries);
  // Looks up `response`'s entries into entries_scratch_; false when it is not this rank's to run
  // (another set's, or one this rank lacks for no reason: the found ones then fail). A joined
  // rank's missing allreduce tensors are zeros (JoinZeros).
  bool gather_entries(const Response& response);
  // One submission's entry (make_entry) over `process_set`, as `in_set` says (its name's label,
  // its split count, its refusals).
  std::unique_ptr<TensorEntry> make_set_entry(OpType op, const TensorView& view,
                                              const std::string& name, ReduceOp reduce_op, int root,
                                              std::string argument, uint8_t flags,
                                              std::vector<int32_t> splits, int32_t process_set,
                                              const ProcessSetRegistry::Submission& in_set,
                                              std::string* local_error) const;
  // Process-set changes and join, on every rank.
  void execute_set_change(const Response& response, const std::vector<TensorEntry*>& entries);
  // The backend that runs `response` on this rank: its process set's (host or device) or the
  // runtime's own; null when this rank has none for it.
  Backend* backend_for(const Response& response) const;
  // Records and completes what `backend` has finished; true when there was anything.
  bool deliver(Backend& backend);
  bool has_device_backend() const { return device_ || sets_.device_backends() > 0; }
  // Every device backend: the runtime's own, then each process set's.
  void each_device_backend(const std::function<void(Backend&)>& f) const;
  // The device backends' completions, when one of them has woken the loop (or `force`).
  bool deliver_device(bool force = false);
  // Waits for all device work in flight and delivers it (before entries die, the file closes or
  // a process set's communicator is freed).
  void drain_backends();
  void fail_everything(const std::string& reason);
  bool busy() const;
  // Moves newly submitted entries into in_flight_; returns their requests.
  std::vector<Request> take_submitted();
  // Heartbeats and silent peers (RANKTIME_PEER_TIMEOUT_S).
  void tend_peers();
  // `fatal`: the reason involves a rank that may never answer (see ResponseList::fatal);
  // `stall`: ... because it stalled (ResponseList::stall).
  void request_shutdown_everywhere(int from_rank, std::string reason, bool fatal = false,
                                   bool stall = false);
  // Any thread: gives up on the job (World::doom), once. `stall`: the ranks are alive, so the
  // abort waits RANKTIME_STALL_SHUTDOWN_S longer for every rank to reach its exit.
  void doom(const std::string& reason, bool stall = false);
  // From the watchdog thread: the collective the background thread is in will not return.
  void on_hang(const std::string& reason, int64_t now_ns);
  timeline::RunMetadata run_metadata(bool mark_cycles) const;

  // Control messages.
  void send_worker_message(std::vector<Request> requests, bool final, bool timeline_ack);
  // Rank 0: sends `list` to every other rank not lost.
  void broadcast(const ResponseList& list);
  // Rank 0: receives and handles one waiting worker message; false when none is waiting.
  bool receive_worker_message();
  // How long rank 0 waits for the other ranks' last messages (at shutdown, at a timeline stop).
  static constexpr double kFinalMessageTimeoutS = 30.0;
  // Rank 0: handles worker messages until every other rank's `counts` entry reaches `target`.
  void await_workers(const std::vector<int64_t>& counts, int64_t target, double timeout_s,
                     const char* what);

  Config config_;
  Clock clock_;
  std::unique_ptr<World> world_;
  // Why a device tensor cannot run here ("" when it can): the world's answer.
  const std::function<std::string(int)> check_device_ = [this](int device) {
    return world_->check_device(device);
  };
  // What a device backend calls from its threads when it has completions for the loop.
  const std::function<void()> wake_for_completions_ = [this] { queue_.wake_for_completions(); };
  ControlChannel* channel_;
  Placement placement_;
  const bool crowded_;  // World::crowded(): synchronous calls leave the steps to the loop
  int64_t start_ns_ = 0;
  int64_t start_wall_us_ = 0;
  Peers peers_;  // every rank's host, pid and placement

  // Shared with user threads.
  SubmissionQueue queue_;
  ProcessSetRegistry sets_;

  // Owned by the background thread.
  std::unordered_map<std::string, std::unique_ptr<TensorEntry>> in_flight_;
  std::unique_ptr<Backend> host_;    // host-memory tensors
  std::unique_ptr<Backend> device_;  // device tensors; null where there is no GPU backend
  std::unique_ptr<TimelineRecorder> timeline_;
  std::unique_ptr<WorkerMessages> to_rank0_;           // other ranks
  std::unique_ptr<CoordinatorMessages> from_workers_;  // rank 0
  std::unique_ptr<Coordinator> coordinator_;           // rank 0
  WorkerCache worker_cache_;                           // other ranks: rank 0's cache ids
  std::unique_ptr<Inspector> inspector_;               // rank 0
  std::unique_ptr<LiveMonitor> live_;                  // rank 0: alerts and metrics
  std::vector<int64_t> finals_;                        // rank 0: final messages seen, per rank
  std::vector<int64_t> timeline_acks_;                 // rank 0: timeline-stop acks seen, per rank
  int64_t timeline_stops_ = 0;                         // rank 0: timeline stops executed
  bool timeline_all_ranks_ = true;                     // agreed at start-up (rank 0's setting)
  int shutdown_from_ = -1;                             // rank 0: first rank that asked to shut down
  std::string shutdown_reason_;                        // rank 0: why (sent with the shutdown)
  bool shutdown_fatal_ = false;                        // rank 0: the shutdown dooms the job
  bool shutdown_stall_ = false;                        // rank 0: ... because of a stall
  bool shutdown_announced_ = false;  // this rank told rank 0 (or, on rank 0, everyone)
  int64_t cycle_ = 0;
  std::vector<Negotiation> negotiations_;
  std::vector<TensorEntry*> entries_scratch_;
  JoinZeros join_zeros_;
  bool finished_ = false;
  std::unique_ptr<Liveness> liveness_;
  std::unique_ptr<SignalReport> signals_;  // when the world handles signals
  std::atomic<bool> doomed_{false};

  std::mutex loop_mutex_;
  std::condition_variable loop_done_cv_;
  bool loop_done_ = false;  // guarded by loop_mutex_: the background loop has returned
  std::thread thread_;
};

}  // namespace ranktime
