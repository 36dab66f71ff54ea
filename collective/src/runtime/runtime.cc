// One rank's runtime: submission, the background loop, negotiation and execution
// (see runtime.h for the protocol).
#include "runtime/runtime.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <map>

#include "core/log.h"
#include "core/wire.h"

namespace ranktime {
namespace {

constexpr int kTagWorker = 1;
constexpr int kTagResponse = 2;
constexpr int kTagPing = 3;
constexpr int kTagPong = 4;
constexpr int kClockSyncRounds = 16;
constexpr size_t kClockWindow = 256;

// After any progress the loop polls without sleeping for this long: the next message of a
// synchronous exchange usually arrives within it, and sleeping would add the timer's latency.
constexpr std::chrono::nanoseconds kSpinAfterProgress = std::chrono::microseconds(30);
// While something is in flight, the longest sleep between polls: bounds how late a straggler's
// arrival is noticed. Idle ranks sleep up to RANKTIME_CYCLE_TIME_MS instead.
constexpr std::chrono::nanoseconds kBusyPollCap = std::chrono::microseconds(200);
constexpr std::chrono::nanoseconds kFirstSleep = std::chrono::microseconds(4);
// Other ranks ship timeline records at least this often when they have nothing else to say.
constexpr int64_t kRecordShipIntervalNs = 100'000'000;
constexpr size_t kRecordShipBatch = 4096;
constexpr double kFinalMessageTimeoutS = 30.0;
// Lateness statistics cover this many recent negotiations; a straggler must be last in at least
// this share of them.
constexpr size_t kLatenessWindow = 200;
constexpr double kStragglerShare = 0.5;
constexpr int64_t kInspectIntervalNs = 1'000'000'000;
// Liveness: heartbeats go at least this often (a quarter of the peer timeout when that is
// shorter); peers are checked at most this often.
constexpr int64_t kHeartbeatIntervalNs = 1'000'000'000;
constexpr int64_t kPeerCheckIntervalNs = 10'000'000;
constexpr size_t kStallNamesShown = 4;
// Every rank outlives a fatal SIGINT/SIGTERM by this much, after its pending operations have
// failed: the program gets to report them, and rank 0, which mpirun signals at the same moment
// as the others, closes its timeline before mpirun sees a rank die and SIGKILLs the rest.
constexpr std::chrono::milliseconds kSignalLinger(500);

std::string seconds_text(int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", ns / 1e9);
  return text;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// Local checks on a submission; "" when fine. The message travels to rank 0 so that the tensor
// fails on every rank, not just here.
std::string check_view(const TensorView& v) {
  if (static_cast<int>(v.dtype) >= kNumDataTypes) {
    return "invalid dtype value " + std::to_string(static_cast<int>(v.dtype));
  }
  if (v.shape.size() > kMaxDims) {
    return "shape has " + std::to_string(v.shape.size()) +
           " dimensions (most: " + std::to_string(kMaxDims) + ")";
  }
  int64_t elements = 1;
  for (int64_t d : v.shape) {
    if (d < 0) return "negative dimension in shape " + shape_str(v.shape);
    if (d != 0 && elements > INT64_MAX / static_cast<int64_t>(dtype_size(v.dtype)) / d) {
      return "shape " + shape_str(v.shape) + " overflows a 64-bit byte count";
    }
    elements *= d;
  }
  size_t bytes = static_cast<size_t>(elements) * dtype_size(v.dtype);
  if (v.data == nullptr && bytes > 0) {
    return "null data pointer for a tensor of " + std::to_string(bytes) + " bytes";
  }
  if (v.data != nullptr && reinterpret_cast<uintptr_t>(v.data) % dtype_size(v.dtype) != 0) {
    return "data pointer is not aligned to its " + std::to_string(dtype_size(v.dtype)) +
           "-byte dtype " + dtype_name(v.dtype);
  }
  if (v.device != kCpuDevice) {
#if RANKTIME_WITH_CUDA
    static const bool has_gpu = gpu::GpuBackend::device_available();
    if (!has_gpu || v.device < 0) {
      return "device tensor (device " + std::to_string(v.device) +
             ") but no CUDA device is available on this host";
    }
#else
    return "device tensors (device " + std::to_string(v.device) +
           ") need ranktime's GPU path, which this build does not have";
#endif
  }
  return "";
}

}  // namespace

Runtime::Runtime(const Config& config) : config_(config), clock_(config.test_clock_skew_us * 1000) {
  MPI_Comm_dup(MPI_COMM_WORLD, &control_);
  MPI_Comm_dup(MPI_COMM_WORLD, &data_);
  MPI_Comm_rank(control_, &rank_);
  MPI_Comm_size(control_, &size_);
  MPI_Comm local;
  MPI_Comm_split_type(control_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &local_rank_);
  MPI_Comm_size(local, &local_size_);
  MPI_Comm_free(&local);
  set_log_context(rank_, config_.log_level);
  for (const auto& [name, value] : config_.describe()) RANKTIME_LOG(kDebug, name << "=" << value);

  // Who is who, for the timeline's run metadata.
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::vector<char> hosts(rank_ == 0 ? 256 * size_ : 0);
  MPI_Gather(host, 256, MPI_CHAR, hosts.data(), 256, MPI_CHAR, 0, control_);
  int64_t pid = getpid();
  pids_.resize(rank_ == 0 ? size_ : 0);
  MPI_Gather(&pid, 1, MPI_INT64_T, pids_.data(), 1, MPI_INT64_T, 0, control_);
  for (int r = 0; rank_ == 0 && r < size_; ++r) hostnames_.emplace_back(&hosts[256 * r]);

  sync_clocks();
  start_ns_ = clock_.now_ns();
  start_wall_us_ = std::chrono::duration_cast<std::chrono::microseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();

  backend_ = std::make_unique<MpiBackend>(data_, &clock_, config_.allreduce_chunk);
#if RANKTIME_WITH_CUDA
  if (gpu::GpuBackend::device_available()) {
    gpu_ = std::make_unique<gpu::GpuBackend>(data_, &clock_, config_, [this] {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        gpu_woken_ = true;
      }
      cv_.notify_one();
    });
  }
#endif
  timeline_ = std::make_unique<TimelineRecorder>(rank_, size_);
  if (rank_ == 0) {
    coordinator_ = std::make_unique<Coordinator>(size_, &timeline_->strings());
    lateness_ = std::make_unique<LatenessTracker>(size_, kLatenessWindow);
  }
  finals_.assign(size_, 0);
  timeline_acks_.assign(size_, 0);

  // Rank 0's timeline settings hold for everyone, so that all ranks agree on what to ship.
  int settings[3] = {config_.timeline_filename.empty() ? 0 : 1, config_.timeline_mark_cycles,
                     config_.timeline_all_ranks};
  MPI_Bcast(settings, 3, MPI_INT, 0, control_);
  timeline_all_ranks_ = settings[2] != 0;
  if (settings[0]) {
    int opened = 1;
    if (rank_ == 0) {
      opened = timeline_
                   ->start(config_.timeline_filename, settings[1], timeline_all_ranks_,
                           run_metadata(settings[1]))
                   .ok();
    }
    MPI_Bcast(&opened, 1, MPI_INT, 0, control_);
    if (opened && rank_ != 0) timeline_->start("", settings[1], timeline_all_ranks_, {});
  }
  // When a rank dies, mpirun ends the job by sending SIGTERM to every other rank: say so, and
  // what was pending, instead of dying silently.
  timeline::install_signal_flush(kSignalLinger);
  signal_callback_ =
      timeline::add_signal_callback([this](int sig, bool fatal) { report_signal(sig, fatal); });
  last_sent_ns_ = last_collective_ns_ = clock_.now_ns();
  last_heard_ns_.assign(size_, last_sent_ns_);
  lost_.assign(size_, 0);
  if (config_.peer_timeout_s > 0 && size_ > 1) {
    peer_timeout_ns_ = static_cast<int64_t>(config_.peer_timeout_s * 1e9);
    heartbeat_ns_ = std::max<int64_t>(1, std::min(kHeartbeatIntervalNs, peer_timeout_ns_ / 4));
    watchdog_ = std::thread(&Runtime::watch_collectives, this);
  }
  thread_ = std::thread(&Runtime::loop, this);
}

void Runtime::report_signal(int sig, bool fatal) {
  const char* signal_name = sig == SIGINT ? "SIGINT" : "SIGTERM";
  std::string names;
  size_t pending = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending = names_in_flight_.size();
    for (const auto& [name, handle] : names_in_flight_) {
      if (names.size() > 200) {
        names += ", ...";
        break;
      }
      names += (names.empty() ? "'" : ", '") + name + "'";
    }
  }
  const std::string text =
      std::string("received ") + signal_name + " with " + std::to_string(pending) +
      " operation(s) pending" + (pending ? ": " + names : std::string()) +
      " (mpirun sends this to every rank when one rank dies or the job is cancelled)";
  RANKTIME_LOG(kError, text);
  if (rank_ == 0) timeline_->instant_from_any_thread(signal_name, text, clock_.now_ns());
  if (fatal) {
    {
      // If the program shuts down now, the other ranks learn why.
      std::lock_guard<std::mutex> lock(mutex_);
      signal_why_ = std::string("received ") + signal_name + " and is ending";
    }
    fail_pending_handles(std::string("this process received ") + signal_name +
                         " and is ending (mpirun sends SIGTERM to every rank when one rank dies "
                         "or the job is cancelled)");
  }
}

void Runtime::fail_pending_handles(const std::string& reason) {
  std::vector<std::pair<std::string, std::shared_ptr<detail::HandleState>>> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!stopped_) {
      stopped_ = true;
      stop_reason_ = reason;
    }
    pending.assign(names_in_flight_.begin(), names_in_flight_.end());
  }
  for (auto& [name, handle] : pending)
    handle->complete(Status::Error(reason + "; tensor '" + name + "' did not complete"));
}

Runtime::~Runtime() {
  timeline::remove_signal_callback(signal_callback_);
  shutdown();
  if (hung_) return;  // the background thread still uses everything; the API leaks this object
  int finalized = 0;
  MPI_Finalized(&finalized);
#if RANKTIME_WITH_CUDA
  gpu_.reset();
#endif
  if (!finalized) {
    backend_.reset();
    MPI_Comm_free(&control_);
    MPI_Comm_free(&data_);
  }
}

void Runtime::sync_clocks() {
  offsets_.assign(size_, OffsetEstimator(kClockWindow));
  if (rank_ == 0) {
    offsets_[0].add({0, 0, 0, 0});
    for (int r = 1; r < size_; ++r) {
      for (int k = 0; k < kClockSyncRounds; ++k) {
        int64_t t0 = clock_.now_ns();
        MPI_Send(&t0, 1, MPI_INT64_T, r, kTagPing, control_);
        int64_t reply[2];
        MPI_Recv(reply, 2, MPI_INT64_T, r, kTagPong, control_, MPI_STATUS_IGNORE);
        offsets_[r].add({t0, reply[0], reply[1], clock_.now_ns()});
      }
      RANKTIME_LOG(kDebug, "clock offset of rank " << r << ": " << offsets_[r].offset_ns() / 1e3
                                                   << " us +- "
                                                   << offsets_[r].uncertainty_ns() / 1e3);
    }
  } else {
    for (int k = 0; k < kClockSyncRounds; ++k) {
      int64_t t0;
      MPI_Recv(&t0, 1, MPI_INT64_T, 0, kTagPing, control_, MPI_STATUS_IGNORE);
      int64_t reply[2] = {clock_.now_ns(), 0};
      reply[1] = clock_.now_ns();
      MPI_Send(reply, 2, MPI_INT64_T, 0, kTagPong, control_);
    }
  }
}

timeline::RunMetadata Runtime::run_metadata(bool mark_cycles) const {
  timeline::RunMetadata m;
  m.ranks = size_;
  m.hostnames = hostnames_;
  m.pids = pids_;
  m.start_time_since_epoch_us = start_wall_us_;
  m.start_ns = start_ns_;
  m.config = config_.describe();
  for (const auto& o : offsets_) {
    m.clock_offsets_us.push_back(o.offset_ns() / 1e3);
    m.clock_uncertainty_us.push_back(o.uncertainty_ns() / 1e3);
  }
  m.mark_cycles = mark_cycles;
  m.all_ranks = timeline_all_ranks_;
  return m;
}

Handle Runtime::submit(OpType op, const TensorView& view, const std::string& name,
                       ReduceOp reduce_op, int root, std::string argument, uint8_t flags) {
  auto state = std::make_shared<detail::HandleState>();
  auto entry = std::make_unique<TensorEntry>();
  entry->handle = state;
  entry->view = view;
  Request& q = entry->request;
  q.name = name;
  q.op = op;
  q.reduce_op = reduce_op;
  q.dtype = view.dtype;
  q.device = view.device;
  q.root = root;
  q.shape = view.shape;
  q.flags = flags;
  q.argument = std::move(argument);
  if (op == OpType::kAllreduce || op == OpType::kAllgather || op == OpType::kBroadcast) {
    q.error = check_view(view);
  }
  // A request must always fit the wire format, even a bad one: its error travels to rank 0.
  if (q.shape.size() > kMaxDims) q.shape.resize(kMaxDims);
  if (static_cast<int>(reduce_op) >= kNumReduceOps) {
    q.error = "invalid reduction value " + std::to_string(static_cast<int>(reduce_op));
    q.reduce_op = ReduceOp::kSum;
  }
  std::string local_error;
  if (name.empty()) local_error = "a tensor name must not be empty";
  if (q.argument.size() > kMaxArgumentBytes) {
    local_error = "argument of " + std::to_string(q.argument.size()) +
                  " bytes is longer than the " + std::to_string(kMaxArgumentBytes) +
                  " bytes allowed";
  }
  if (name.size() > kMaxNameBytes) {
    local_error = "tensor '" + name.substr(0, 64) + "...': name of " + std::to_string(name.size()) +
                  " bytes is longer than the " + std::to_string(kMaxNameBytes) + " bytes allowed";
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopped_) {
      local_error = stop_reason_ + "; tensor '" + name + "' was not submitted";
    } else if (local_error.empty() && names_in_flight_.count(name)) {
      local_error = "tensor '" + name +
                    "' was submitted twice while in flight: wait for the first "
                    "operation to complete before reusing its name";
    }
    if (local_error.empty()) {
      q.ready_ns = clock_.now_ns();
      names_in_flight_.emplace(name, state);
      submitted_.push_back(std::move(entry));
    }
  }
  if (!local_error.empty()) {
    state->complete(Status::Error(local_error));
  } else {
    cv_.notify_one();
  }
  return Handle(state);
}

void Runtime::shutdown(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!shutdown_requested_) shutdown_why_ = signal_why_.empty() ? why : signal_why_;
    shutdown_requested_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) {
    std::unique_lock<std::mutex> lock(mutex_);
    loop_done_cv_.wait(lock, [&] { return loop_done_ || hung_.load(); });
    const bool done = loop_done_;
    lock.unlock();
    if (done) {
      thread_.join();
    } else {
      thread_.detach();  // stuck in a collective that will never return
    }
  }
  if (watchdog_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(watchdog_mutex_);
      watchdog_stop_ = true;
    }
    watchdog_cv_.notify_one();
    watchdog_.join();
  }
}

// ---------------------------------------------------------------------------------------------
// Background loop

void Runtime::loop() {
  // Short sleeps must be short: the default 50 us timer slack would dominate them.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  auto last_progress = std::chrono::steady_clock::now();
  std::chrono::nanoseconds sleep{0};
  std::chrono::nanoseconds idle_cap(static_cast<int64_t>(config_.cycle_time_ms * 1e6));
  if (heartbeat_ns_ > 0) idle_cap = std::min(idle_cap, std::chrono::nanoseconds(heartbeat_ns_));
  while (!finished_) {
    bool progressed = rank_ == 0 ? coordinator_step() : worker_step();
    progressed = deliver_gpu_completions() || progressed;
    if (!finished_) tend_peers();
    if (finished_) break;
    auto now = std::chrono::steady_clock::now();
    if (progressed) {
      last_progress = now;
      sleep = std::chrono::nanoseconds(0);
      continue;
    }
    reap_sends(false);
    if (now - last_progress < kSpinAfterProgress) continue;
    auto cap = busy() ? std::min(kBusyPollCap, idle_cap) : idle_cap;
    sleep = std::min(cap, std::max(kFirstSleep, sleep * 2));
    wait_for_work(sleep);
  }
  // Sends to a lost rank may never complete: leave them.
  if (!peer_lost_) reap_sends(true);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    loop_done_ = true;
  }
  loop_done_cv_.notify_all();
}

// ---------------------------------------------------------------------------------------------
// Liveness

void Runtime::tend_peers() {
  if (peer_timeout_ns_ == 0) return;
  const int64_t now = clock_.now_ns();
  send_heartbeats(now);
  check_peers(now);
}

std::string Runtime::peer_timeout_setting() const {
  return "RANKTIME_PEER_TIMEOUT_S=" + seconds_text(peer_timeout_ns_);
}

void Runtime::send_heartbeats(int64_t now) {
  if (now - last_sent_ns_ < heartbeat_ns_) return;
  if (rank_ == 0) {
    ResponseList list;  // nothing to execute: "rank 0 is alive" (and a clock sample)
    list.cycle = cycle_;
    list.sent_ns = now;
    broadcast(list);
  } else {
    send_worker_message({}, false, false);
  }
}

int64_t Runtime::silent_ns(int rank, int64_t now) const {
  return now - std::max(last_heard_ns_[rank], last_collective_ns_);
}

void Runtime::set_executing(const Response* response, int64_t since_ns) {
  if (peer_timeout_ns_ == 0) return;  // no watchdog reads it
  std::lock_guard<std::mutex> lock(exec_mutex_);
  executing_ = response;
  executing_since_ns_ = since_ns;
}

void Runtime::check_peers(int64_t now) {
  if (now - last_peer_check_ns_ < kPeerCheckIntervalNs) return;
  last_peer_check_ns_ = now;
  if (rank_ != 0) {
    if (silent_ns(0, now) <= peer_timeout_ns_) return;
    peer_lost_ = true;
    const std::string reason = "rank 0 has sent nothing for " + seconds_text(silent_ns(0, now)) +
                               " s (" + peer_timeout_setting() + "): it died or hangs";
    RANKTIME_LOG(kError, reason);
    fail_everything("ranktime has stopped: " + reason);
    finished_ = true;
    return;
  }
  std::string lost;
  int first_lost = -1;
  for (int r = 1; r < size_; ++r) {
    if (lost_[r] || silent_ns(r, now) <= peer_timeout_ns_) continue;
    lost_[r] = 1;
    if (first_lost < 0) first_lost = r;
    lost += (lost.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " (host " +
            hostnames_[r] + ", pid " + std::to_string(pids_[r]) + ") has sent nothing for " +
            seconds_text(silent_ns(r, now)) + " s";
  }
  if (first_lost < 0) return;
  peer_lost_ = true;
  const std::string reason = lost + " (" + peer_timeout_setting() + "): it died or hangs";
  RANKTIME_LOG(kError, reason);
  timeline_->instant("PEER_LOST", reason, now);
  request_shutdown_everywhere(first_lost, reason);
}

void Runtime::watch_collectives() {
  std::unique_lock<std::mutex> lock(watchdog_mutex_);
  while (!watchdog_stop_) {
    watchdog_cv_.wait_for(lock, std::chrono::nanoseconds(heartbeat_ns_),
                          [&] { return watchdog_stop_; });
    if (watchdog_stop_) return;
    std::string what;
    int64_t now = 0, stuck_ns = 0;
    {
      std::lock_guard<std::mutex> exec(exec_mutex_);
      now = clock_.now_ns();
      stuck_ns = now - executing_since_ns_;
      if (executing_ == nullptr || stuck_ns <= peer_timeout_ns_) continue;
      const Response& r = *executing_;
      what = std::string(op_type_name(r.op));
      if (!r.names.empty()) what += " of '" + r.names.front() + "'";
      if (r.names.size() > 1) {
        what += " (and " + std::to_string(r.names.size() - 1) + " tensor(s) fused with it)";
      }
    }
    hung_ = true;
    peer_lost_ = true;
    const std::string reason = "rank " + std::to_string(rank_) + ": the " + what +
                               " has not returned after " + seconds_text(stuck_ns) + " s (" +
                               peer_timeout_setting() +
                               "): another rank probably died or hangs; ranktime has stopped";
    RANKTIME_LOG(kError, reason);
    if (rank_ == 0) {
      timeline_->instant_from_any_thread("PEER_TIMEOUT", reason, now);
      timeline_->close_from_any_thread();  // the background thread will not close it
    }
    fail_pending_handles(reason);
    {
      std::lock_guard<std::mutex> done(mutex_);  // shutdown() may be waiting for the loop
    }
    loop_done_cv_.notify_all();
    return;
  }
}

bool Runtime::busy() const {
  bool gpu_pending = false;
#if RANKTIME_WITH_CUDA
  gpu_pending = gpu_ && gpu_->pending() > 0;
#endif
  return !in_flight_.empty() || (coordinator_ && coordinator_->pending() > 0) ||
         timeline_->outbox_size() > 0 || gpu_pending;
}

void Runtime::wait_for_work(std::chrono::nanoseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait_for(lock, timeout, [&] {
    bool gpu_woken = false;
#if RANKTIME_WITH_CUDA
    gpu_woken = gpu_woken_;
#endif
    return !submitted_.empty() || (shutdown_requested_ && !shutdown_announced_) || gpu_woken;
  });
}

std::vector<Request> Runtime::take_submitted() {
  std::vector<std::unique_ptr<TensorEntry>> batch;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    batch.swap(submitted_);
  }
  std::vector<Request> requests;
  requests.reserve(batch.size());
  for (auto& e : batch) {
    requests.push_back(e->request);
    std::string name = e->request.name;
    in_flight_.emplace(std::move(name), std::move(e));
  }
  return requests;
}

bool Runtime::worker_step() {
  bool progressed = false;
  while (true) {
    int flag = 0;
    MPI_Status status;
    MPI_Iprobe(0, kTagResponse, control_, &flag, &status);
    if (!flag) break;
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    recv_buffer_.resize(count);
    MPI_Recv(recv_buffer_.data(), count, MPI_BYTE, 0, kTagResponse, control_, MPI_STATUS_IGNORE);
    const int64_t arrival = clock_.now_ns();
    last_heard_ns_[0] = arrival;
    ResponseList list;
    try {
      list = decode_response_list(recv_buffer_.data(), recv_buffer_.size());
    } catch (const WireError& e) {
      RANKTIME_LOG(kError, "corrupt response list from rank 0: " << e.what());
      fail_everything(std::string("corrupt response list from rank 0: ") + e.what());
      finished_ = true;
      return true;
    }
    echo_ = {list.sent_ns, arrival, 0};
    execute(list, arrival);
    progressed = true;
    if (finished_) return true;
  }
  std::vector<Request> requests = take_submitted();
  bool announce = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    announce = shutdown_requested_ && !shutdown_announced_;
  }
  const size_t outbox = timeline_->outbox_size();
  const bool records_due =
      outbox > 0 && (outbox >= kRecordShipBatch ||
                     clock_.now_ns() - timeline_->outbox_oldest_ns() > kRecordShipIntervalNs);
  if (!requests.empty() || announce || records_due) {
    shutdown_announced_ = shutdown_announced_ || announce;
    send_worker_message(std::move(requests), false, false);
    progressed = true;
  }
  return progressed;
}

void Runtime::send_worker_message(std::vector<Request> requests, bool final, bool timeline_ack) {
  WorkerMessage m;
  m.requests = std::move(requests);
  m.records = timeline_->take_outbox();
  if (echo_.t0 != 0) {
    m.clock = echo_;
    m.clock.t2 = clock_.now_ns();
    echo_ = {};
  }
  m.shutdown = shutdown_announced_;
  if (m.shutdown) {
    std::lock_guard<std::mutex> lock(mutex_);
    m.shutdown_why = shutdown_why_;
  }
  m.final = final;
  m.timeline_ack = timeline_ack;
  auto buffer = std::make_shared<std::vector<uint8_t>>();
  encode(m, buffer.get());
  PendingSend send{MPI_REQUEST_NULL, buffer};
  MPI_Isend(buffer->data(), static_cast<int>(buffer->size()), MPI_BYTE, 0, kTagWorker, control_,
            &send.request);
  sends_.push_back(std::move(send));
  last_sent_ns_ = clock_.now_ns();
}

void Runtime::reap_sends(bool wait) {
  while (!sends_.empty()) {
    int done = 0;
    if (wait) {
      MPI_Wait(&sends_.front().request, MPI_STATUS_IGNORE);
      done = 1;
    } else {
      MPI_Test(&sends_.front().request, &done, MPI_STATUS_IGNORE);
    }
    if (!done) return;
    sends_.pop_front();
  }
}

bool Runtime::coordinator_step() {
  bool progressed = false;
  bool added = false;
  while (receive_worker_message()) progressed = added = true;
  for (Request& q : take_submitted()) {
    coordinator_->add(0, std::move(q));
    added = true;
  }
  std::string self_shutdown;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (shutdown_requested_) self_shutdown = shutdown_why_;
  }
  if (!self_shutdown.empty()) request_shutdown_everywhere(0, "rank 0 " + self_shutdown);
  int64_t now = clock_.now_ns();
  ResponseList list;
  if (added) {
    negotiations_.clear();
    list.responses = coordinator_->take_ready(
        FusionOptions{config_.fusion_threshold, config_.fusion_max_tensor}, &negotiations_);
    now = clock_.now_ns();
    timeline_->negotiations(negotiations_, now);
    std::lock_guard<std::mutex> lock(lateness_mutex_);
    for (const Negotiation& n : negotiations_) {
      if (n.op != OpType::kTimelineStart && n.op != OpType::kTimelineStop)
        lateness_->add(n.ready_ns);
    }
  }
  if (now - last_inspect_ns_ >= kInspectIntervalNs && busy()) inspect(now);
  const bool shutdown_now = shutdown_from_ >= 0;
  if (list.responses.empty() && !shutdown_now) return progressed;

  list.cycle = ++cycle_;
  list.sent_ns = now;
  list.shutdown = shutdown_now;
  list.shutdown_reason = shutdown_reason_;
  timeline_->cycle(cycle_, now);
  broadcast(list);
  execute(list, now);
  return true;
}

void Runtime::broadcast(const ResponseList& list) {
  if (size_ == 1) return;
  auto buffer = std::make_shared<std::vector<uint8_t>>();
  encode(list, buffer.get());
  for (int r = 1; r < size_; ++r) {
    if (lost_[r]) continue;
    PendingSend send{MPI_REQUEST_NULL, buffer};
    MPI_Isend(buffer->data(), static_cast<int>(buffer->size()), MPI_BYTE, r, kTagResponse, control_,
              &send.request);
    sends_.push_back(std::move(send));
  }
  last_sent_ns_ = clock_.now_ns();
}

bool Runtime::receive_worker_message() {
  int flag = 0;
  MPI_Status status;
  MPI_Iprobe(MPI_ANY_SOURCE, kTagWorker, control_, &flag, &status);
  if (!flag) return false;
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  recv_buffer_.resize(count);
  MPI_Recv(recv_buffer_.data(), count, MPI_BYTE, status.MPI_SOURCE, kTagWorker, control_,
           MPI_STATUS_IGNORE);
  handle_worker_message(status.MPI_SOURCE, recv_buffer_.data(), recv_buffer_.size());
  return true;
}

void Runtime::handle_worker_message(int source, const uint8_t* data, size_t size) {
  const int64_t now = clock_.now_ns();
  last_heard_ns_[source] = now;  // even a corrupt message says the rank is alive
  WorkerMessage& m = incoming_;
  try {
    decode_worker_message_into(data, size, &m);
  } catch (const WireError& e) {
    RANKTIME_LOG(kError, "dropped a corrupt message from rank " << source << ": " << e.what());
    return;
  }
  OffsetEstimator& offset = offsets_[source];
  if (m.clock.t0 != 0) offset.add({m.clock.t0, m.clock.t1, m.clock.t2, now});
  for (Request& q : m.requests) {
    q.ready_ns = offset.to_rank0(q.ready_ns);
    coordinator_->add(source, std::move(q));
  }
  if (!m.records.empty()) timeline_->ingest(&m.records, offset);
  if (m.shutdown) {
    request_shutdown_everywhere(
        source, "rank " + std::to_string(source) + " " +
                    (m.shutdown_why.empty() ? "called shutdown()" : m.shutdown_why));
  }
  if (m.final) ++finals_[source];
  if (m.timeline_ack) ++timeline_acks_[source];
}

void Runtime::await_workers(const std::vector<int64_t>& counts, int64_t target, double timeout_s,
                            const char* what) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::nanoseconds(static_cast<int64_t>(timeout_s * 1e9));
  std::chrono::microseconds sleep(1);
  while (true) {
    if (receive_worker_message()) {
      sleep = std::chrono::microseconds(1);
      continue;
    }
    tend_peers();  // a rank that died meanwhile is not waited for
    std::string missing;
    for (int r = 1; r < size_; ++r) {
      if (lost_[r]) continue;
      if (counts[r] < target) missing += (missing.empty() ? "" : ",") + std::to_string(r);
    }
    if (missing.empty()) return;
    if (std::chrono::steady_clock::now() > deadline) {
      RANKTIME_LOG(kWarning, "gave up waiting for " << what << " from ranks " << missing);
      return;
    }
    reap_sends(false);
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(200));
  }
}

void Runtime::request_shutdown_everywhere(int from_rank, std::string reason) {
  if (shutdown_from_ >= 0) return;  // the first reason stands
  shutdown_from_ = from_rank;
  shutdown_reason_ = std::move(reason);
}

std::vector<RankLateness> Runtime::lateness() const {
  if (rank_ != 0) return {};
  std::vector<RankLateness> stats;
  {
    std::lock_guard<std::mutex> lock(lateness_mutex_);
    stats = lateness_->snapshot();
  }
  for (RankLateness& s : stats) s.hostname = hostnames_.at(s.rank);
  return stats;
}

void Runtime::inspect(int64_t now) {
  last_inspect_ns_ = now;
  // Stalls: tensors some ranks submitted long ago and others never did. Warn once per tensor,
  // grouping tensors by the set of ranks that are missing.
  const int64_t warn_ns = static_cast<int64_t>(config_.stall_warning_s * 1e9);
  std::map<std::vector<int>, std::vector<const Coordinator::Stalled*>> groups;
  std::vector<Coordinator::Stalled> stalled = coordinator_->stalled(now - warn_ns);
  std::unordered_set<std::string> still_stalled;
  for (const auto& s : stalled) {
    still_stalled.insert(s.name);
    if (!stall_warned_.count(s.name)) groups[s.missing_ranks].push_back(&s);
  }
  stall_warned_ = std::move(still_stalled);
  auto describe = [](const std::vector<int>& ranks,
                     const std::vector<const Coordinator::Stalled*>& tensors, int64_t now_ns) {
    std::string text = ranks.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < ranks.size(); ++i) text += (i ? "," : "") + std::to_string(ranks[i]);
    text += " did not submit ";
    for (size_t i = 0; i < tensors.size() && i < kStallNamesShown; ++i)
      text += (i ? ", '" : "'") + tensors[i]->name + "'";
    if (tensors.size() > kStallNamesShown)
      text += " and " + std::to_string(tensors.size() - kStallNamesShown) + " more";
    text += " (other ranks submitted " +
            std::to_string((now_ns - tensors[0]->first_ready_ns) / 1'000'000'000) + " s ago)";
    return text;
  };
  for (const auto& [ranks, tensors] : groups) {
    std::string text = describe(ranks, tensors, now);
    RANKTIME_LOG(kWarning, "stall: " << text);
    timeline_->instant("STALL", text, now);
  }
  if (config_.stall_shutdown_s > 0) {
    auto dead = coordinator_->stalled(now - static_cast<int64_t>(config_.stall_shutdown_s * 1e9));
    if (!dead.empty()) {
      std::map<std::vector<int>, std::vector<const Coordinator::Stalled*>> by_ranks;
      for (const auto& s : dead) by_ranks[s.missing_ranks].push_back(&s);
      std::string text;
      for (const auto& [ranks, tensors] : by_ranks)
        text += (text.empty() ? "" : "; ") + describe(ranks, tensors, now);
      RANKTIME_LOG(kError, "stall: shutting down after RANKTIME_STALL_SHUTDOWN_S="
                               << config_.stall_shutdown_s << " s: " << text);
      timeline_->instant("STALL_SHUTDOWN", text, now);
      request_shutdown_everywhere(0, "stalled for more than RANKTIME_STALL_SHUTDOWN_S: " + text);
    }
  }

  // Persistent stragglers and lateness counters.
  std::vector<RankLateness> stats;
  std::optional<int> straggler;
  {
    std::lock_guard<std::mutex> lock(lateness_mutex_);
    stats = lateness_->snapshot();
    if (config_.straggler_threshold_ms > 0) {
      straggler = lateness_->straggler(config_.straggler_threshold_ms * 1e3, kStragglerShare);
    }
  }
  if (straggler && now - last_straggler_warning_ns_ >=
                       static_cast<int64_t>(config_.straggler_warning_interval_s * 1e9)) {
    last_straggler_warning_ns_ = now;
    const RankLateness& s = stats[*straggler];
    char median[32];
    std::snprintf(median, sizeof(median), "%.1f", s.median_lag_us / 1e3);
    RANKTIME_LOG(kWarning, "straggler: rank " << s.rank << " on host " << hostnames_[s.rank]
                                              << " was the last to be ready in "
                                              << s.window_times_last << " of the last " << s.window
                                              << " negotiations, median lag " << median << " ms");
  }
  for (const RankLateness& s : stats) {
    timeline_->counter("lateness_median_lag_us", s.rank, s.median_lag_us, now);
    timeline_->counter("lateness_share_last", s.rank,
                       s.window ? double(s.window_times_last) / s.window : 0, now);
  }
}

void Runtime::execute(const ResponseList& list, int64_t arrival_ns) {
  for (const Response& r : list.responses) {
    entries_scratch_.clear();
    for (const std::string& name : r.names) {
      auto it = in_flight_.find(name);
      if (it == in_flight_.end()) {
        RANKTIME_LOG(kError,
                     "rank 0 scheduled tensor '" << name << "', which this rank never submitted");
        continue;
      }
      entries_scratch_.push_back(it->second.get());
    }
    if (entries_scratch_.size() != r.names.size()) {
      for (TensorEntry* e : entries_scratch_) {
        complete(e, Status::Error("tensor '" + e->request.name +
                                  "': internal error: inconsistent response"));
      }
      continue;
    }
    if (r.op == OpType::kTimelineStart || r.op == OpType::kTimelineStop) {
      execute_control(r, entries_scratch_);
      continue;
    }
    Status status;
#if RANKTIME_WITH_CUDA
    if (r.error.empty() && r.device != kCpuDevice && gpu_) {
      gpu_->enqueue(r, entries_scratch_, arrival_ns);  // completes later, on the GPU's terms
      continue;
    }
#endif
    if (r.error.empty()) {
      const int64_t start = clock_.now_ns();
      set_executing(&r, start);
      status = backend_->execute(r, entries_scratch_, &phase_log_);
      set_executing(nullptr, 0);
      const int64_t end = clock_.now_ns();
      last_collective_ns_ = end;  // a completed collective: every rank was alive
      timeline_->processed(r, entries_scratch_, arrival_ns, start, end, phase_log_, status);
      phase_log_.clear();
    } else {
      status = Status::Error(r.error);
    }
    for (TensorEntry* e : entries_scratch_) complete(e, status);
  }
  if (!list.shutdown) return;
  fail_everything("ranktime has shut down: " + list.shutdown_reason);
  if (rank_ == 0) {
    await_workers(finals_, 1, kFinalMessageTimeoutS, "the final messages");
    timeline_->stop();
  } else {
    send_worker_message({}, true, false);
    reap_sends(true);
    timeline_->stop();
  }
  finished_ = true;
}

void Runtime::execute_control(const Response& response, const std::vector<TensorEntry*>& entries) {
  Status status;
  if (response.op == OpType::kTimelineStart) {
    if (rank_ == 0) {
      status = timeline_->start(response.argument, response.flags & 1, timeline_all_ranks_,
                                run_metadata(response.flags & 1));
    } else {
      timeline_->start("", response.flags & 1, timeline_all_ranks_, {});
    }
  } else {
    drain_gpu();  // GPU work before the stop belongs in this file
    if (rank_ == 0) {
      // Other ranks send their last records with the acknowledgement; close after they are in.
      await_workers(timeline_acks_, ++timeline_stops_, kFinalMessageTimeoutS, "timeline records");
    } else {
      send_worker_message({}, false, true);
    }
    timeline_->stop();
  }
  for (TensorEntry* e : entries) complete(e, status);
}

void Runtime::complete(TensorEntry* entry, const Status& status) {
  auto handle = entry->handle;
  const std::string name = entry->request.name;  // the entry dies with its map node
  {
    // Free the name before waking the waiter: it may reuse the name at once.
    std::lock_guard<std::mutex> lock(mutex_);
    names_in_flight_.erase(name);
  }
  in_flight_.erase(name);
  handle->complete(status);
}

bool Runtime::deliver_gpu_completions(bool force) {
#if RANKTIME_WITH_CUDA
  if (!gpu_) return false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!gpu_woken_ && !force) return false;
    gpu_woken_ = false;
  }
  gpu_done_.clear();
  gpu_->take_completions(&gpu_done_);
  for (gpu::GpuCompletion& c : gpu_done_) {
    timeline_->processed(c.response, c.entries, c.arrival_ns, c.start_ns, c.end_ns, c.log, c.status,
                         &c.entry_logs);
    for (TensorEntry* e : c.entries) complete(e, c.status);
  }
  return !gpu_done_.empty();
#else
  (void)force;
  return false;
#endif
}

void Runtime::drain_gpu() {
#if RANKTIME_WITH_CUDA
  if (!gpu_) return;
  gpu_->drain();
  deliver_gpu_completions(true);
#endif
}

void Runtime::fail_everything(const std::string& reason) {
  drain_gpu();
  std::vector<std::unique_ptr<TensorEntry>> submitted;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = true;
    stop_reason_ = reason;
    submitted.swap(submitted_);
    names_in_flight_.clear();
  }
  for (auto& e : submitted)
    e->handle->complete(Status::Error(reason + "; tensor '" + e->request.name + "' did not run"));
  for (auto& [name, e] : in_flight_)
    e->handle->complete(Status::Error(reason + "; tensor '" + name + "' did not run"));
  in_flight_.clear();
  if (coordinator_) coordinator_->drain();
}

}  // namespace ranktime
