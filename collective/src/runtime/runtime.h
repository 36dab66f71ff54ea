// The runtime of one rank: the queue user threads submit to, and the background thread that
// negotiates with rank 0, executes the agreed responses and completes the handles.
//
// Protocol (one communicator of our own, point to point):
//   other ranks -> rank 0: WorkerMessage when they have new requests, timeline records to ship,
//                          or a shutdown to announce;
//   rank 0 -> other ranks: ResponseList whenever tensors became ready on every rank.
// Every rank executes every ResponseList, in the order rank 0 sent them.
#pragma once

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backends/mpi/mpi_backend.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/tensor_entry.h"
#include "inspection/lateness.h"
#include "negotiation/coordinator.h"
#include "recording/timeline_recorder.h"
#if RANKTIME_WITH_CUDA
#include "backends/gpu/gpu_backend.h"
#endif

namespace ranktime {

class Runtime {
 public:
  // Collective over MPI_COMM_WORLD (MPI must be initialised with MPI_THREAD_MULTIPLE).
  explicit Runtime(const Config& config);
  ~Runtime();  // shutdown()
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

  // Queues one request; never blocks on the network.
  Handle submit(OpType op, const TensorView& view, const std::string& name,
                ReduceOp reduce_op = ReduceOp::kSum, int root = 0, std::string argument = {},
                uint8_t flags = 0);

  // Announces shutdown to every rank (with `why`, e.g. "called shutdown()") and waits for the
  // background thread to finish.
  void shutdown(const std::string& why = "called shutdown()");

  // Rank 0: per-rank lateness statistics; other ranks: empty.
  std::vector<RankLateness> lateness() const;

  // This runtime gave up on a peer (RANKTIME_PEER_TIMEOUT_S): a rank stopped sending heartbeats,
  // or a collective never returned. MPI must then not be finalised (it would wait for the dead).
  bool peer_lost() const { return peer_lost_.load(); }
  // The background thread is stuck in a collective the watchdog gave up on: shutdown() returns
  // without it, and the Runtime must be leaked, not destroyed (the thread still uses it).
  bool hung() const { return hung_.load(); }

 private:
  // Background thread.
  void loop();
  bool coordinator_step();  // rank 0
  bool worker_step();       // other ranks
  bool busy() const;
  void wait_for_work(std::chrono::nanoseconds timeout);

  // Moves newly submitted entries into in_flight_; returns their requests.
  std::vector<Request> take_submitted();
  // Rank 0: receives and handles one waiting worker message; false when none is waiting.
  bool receive_worker_message();
  void handle_worker_message(int source, const uint8_t* data, size_t size);
  void execute(const ResponseList& list, int64_t arrival_ns);
  void execute_control(const Response& response, const std::vector<TensorEntry*>& entries);
  void complete(TensorEntry* entry, const Status& status);
  void fail_everything(const std::string& reason);
  void send_worker_message(std::vector<Request> requests, bool final, bool timeline_ack);
  // Rank 0: handles worker messages until every other rank's `counts` entry reaches `target`.
  void await_workers(const std::vector<int64_t>& counts, int64_t target, double timeout_s,
                     const char* what);
  void reap_sends(bool wait);
  // Records and completes what the GPU backend finished; `force` takes them even without a wake.
  bool deliver_gpu_completions(bool force = false);
  // Waits for all GPU work in flight and delivers it (before entries die or the file closes).
  void drain_gpu();

  // Start-up.
  void sync_clocks();
  // From the signal watcher thread: logs the operations pending when SIGINT/SIGTERM arrived,
  // marks it in the timeline and, when the signal will end the process, fails them.
  void report_signal(int sig, bool fatal);
  // From any thread: fails every handle not yet completed and refuses new submissions; the
  // background thread's own state stays its own.
  void fail_pending_handles(const std::string& reason);

  // Liveness (RANKTIME_PEER_TIMEOUT_S), background thread: heartbeats to the ranks this rank
  // talks to when it has sent nothing else lately, and peers silent for too long declared lost.
  // Both, when a peer timeout is set.
  void tend_peers();
  void send_heartbeats(int64_t now_ns);
  void check_peers(int64_t now_ns);
  // "RANKTIME_PEER_TIMEOUT_S=<s>", for messages.
  std::string peer_timeout_setting() const;
  // How long `rank` (on rank 0; elsewhere rank 0) has not been heard from: no message and no
  // completed collective.
  int64_t silent_ns(int rank, int64_t now_ns) const;
  // For the watchdog: the collective the background thread is inside (null: none).
  void set_executing(const Response* response, int64_t since_ns);
  // Rank 0: sends `list` to every other rank.
  void broadcast(const ResponseList& list);
  // Watchdog thread: gives up on a collective that has not returned within the peer timeout.
  void watch_collectives();
  // Rank 0, at most once a second: stalled tensors, persistent stragglers, lateness counters.
  void inspect(int64_t now_ns);
  void request_shutdown_everywhere(int from_rank, std::string reason);
  timeline::RunMetadata run_metadata(bool mark_cycles) const;

  Config config_;
  Clock clock_;
  MPI_Comm control_ = MPI_COMM_NULL;  // negotiation messages
  MPI_Comm data_ = MPI_COMM_NULL;     // the collectives themselves
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  int64_t start_ns_ = 0;
  int64_t start_wall_us_ = 0;
  std::vector<std::string> hostnames_;
  std::vector<int64_t> pids_;

  // Shared with user threads.
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<TensorEntry>> submitted_;
  // Every handle not yet completed, by tensor name (what the signal watcher and the watchdog
  // fail when the background thread cannot).
  std::unordered_map<std::string, std::shared_ptr<detail::HandleState>> names_in_flight_;
  bool shutdown_requested_ = false;
  std::string shutdown_why_;  // this rank's reason, as the other ranks will read it
  std::string signal_why_;    // set when a fatal signal arrived: the reason for any shutdown
  bool stopped_ = false;
  std::string stop_reason_;

  // Owned by the background thread.
  std::unordered_map<std::string, std::unique_ptr<TensorEntry>> in_flight_;
  std::unique_ptr<MpiBackend> backend_;
  std::unique_ptr<TimelineRecorder> timeline_;
  std::unique_ptr<Coordinator> coordinator_;   // rank 0
  std::vector<OffsetEstimator> offsets_;       // rank 0, per rank
  std::vector<int64_t> finals_;                // rank 0: final messages seen, per rank
  std::vector<int64_t> timeline_acks_;         // rank 0: timeline-stop acks seen, per rank
  int64_t timeline_stops_ = 0;                 // rank 0: timeline stops executed
  bool timeline_all_ranks_ = true;             // agreed at start-up (rank 0's setting)
  int shutdown_from_ = -1;                     // rank 0: first rank that asked to shut down
  std::string shutdown_reason_;                // rank 0: why (sent with the shutdown)
  mutable std::mutex lateness_mutex_;          // lateness_ is read by user threads
  std::unique_ptr<LatenessTracker> lateness_;  // rank 0
  int64_t last_inspect_ns_ = 0;
  int64_t last_straggler_warning_ns_ = INT64_MIN / 2;
  std::unordered_set<std::string> stall_warned_;  // rank 0: tensors already warned about
  bool shutdown_announced_ = false;               // this rank told rank 0 (or, on rank 0, everyone)
  int64_t cycle_ = 0;
  ClockEcho echo_;  // worker: last response list's timestamps
  struct PendingSend {
    MPI_Request request;
    std::shared_ptr<std::vector<uint8_t>> buffer;
  };
  std::deque<PendingSend> sends_;
  std::vector<uint8_t> recv_buffer_;
  WorkerMessage incoming_;  // rank 0: the message being handled (its memory is reused)
  std::vector<uint8_t> send_buffer_;
  std::vector<Negotiation> negotiations_;
  std::vector<TensorEntry*> entries_scratch_;
  PhaseLog phase_log_;
  bool finished_ = false;
  int signal_callback_ = 0;  // reports pending operations when the job is signalled
  bool loop_done_ = false;   // guarded by mutex_: the background loop has returned
  std::condition_variable loop_done_cv_;

  // Liveness. last_heard_ns_: the last message, on rank 0 per rank, elsewhere [0] = rank 0.
  int64_t peer_timeout_ns_ = 0;  // 0: never give up
  int64_t heartbeat_ns_ = 0;
  int64_t last_sent_ns_ = 0;
  int64_t last_peer_check_ns_ = 0;
  std::vector<int64_t> last_heard_ns_;
  int64_t last_collective_ns_ = 0;  // the last collective that completed
  std::vector<char> lost_;          // rank 0: ranks given up on
  std::atomic<bool> peer_lost_{false};
  std::atomic<bool> hung_{false};
  std::mutex exec_mutex_;  // guards the two below, which the watchdog reads
  const Response* executing_ = nullptr;
  int64_t executing_since_ns_ = 0;
  std::mutex watchdog_mutex_;
  std::condition_variable watchdog_cv_;
  bool watchdog_stop_ = false;
  std::thread watchdog_;
#if RANKTIME_WITH_CUDA
  std::unique_ptr<gpu::GpuBackend> gpu_;  // device tensors; null when this host has no GPU
  bool gpu_woken_ = false;                // guarded by mutex_: completions are waiting
  std::vector<gpu::GpuCompletion> gpu_done_;
#endif
  std::thread thread_;
};

}  // namespace ranktime
