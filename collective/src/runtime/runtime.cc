// One rank's runtime: start-up, the background loop, rank 0's and the workers' step, and the
// control messages (see runtime.h for the protocol and a tensor's way through the rooms;
// submissions and synchronous calls are in runtime_submit.cc, execution and completion in
// runtime_execute.cc).
#include "runtime/runtime.h"

#include <sys/prctl.h>

#include <algorithm>
#include <chrono>

#include "core/backoff.h"
#include "core/log.h"
#include "core/wire.h"
#include "runtime/rendezvous.h"

namespace ranktime {
namespace {

// Other ranks ship timeline records at least this often when they have nothing else to say.
constexpr int64_t kRecordShipIntervalNs = 100'000'000;
constexpr size_t kRecordShipBatch = 4096;
// How many cycle times an idle rank other than 0 sleeps between polls (each wake-up costs tens
// of microseconds of CPU on a VM; docs/benchmarks.md).
constexpr int kWorkerIdleCycles = 8;

}  // namespace

Runtime::Runtime(const Config& config, std::unique_ptr<World> world)
    : config_(config),
      clock_(config.test_clock_skew_us * 1000),
      world_(std::move(world)),
      channel_(&world_->control()),
      placement_(world_->placement()),
      crowded_(world_->crowded()),
      sets_(placement_.rank, placement_.size) {
  set_log_context(rank(), config_.log_level);
  check_lane_ranks(config_.timeline_ranks, size());  // on every rank, before any exchange
  for (const auto& [name, value] : config_.describe()) RANKTIME_LOG(kDebug, name << "=" << value);
  if (rank() == 0) {
    for (const std::string& w : config_.warnings) RANKTIME_LOG(kWarning, w);
  }

  // Who is who, for the timeline's run metadata; then the clocks.
  peers_ = gather_peers(*channel_, placement_);
  std::vector<OffsetEstimator> offsets = sync_clocks(*channel_, clock_);
  // Where every rank shares rank 0's host, a worker's message wakes rank 0's sleep (loop()).
  WakeWord* rank0_wake = channel_->share_rank0_wake();
  if (rank() == 0 && rank0_wake != nullptr) queue_.set_wake_word(rank0_wake);
  if (rank() == 0 && size() > 1) {
    RANKTIME_LOG(
        kDebug, (queue_.has_wake_word() ? "idle, rank 0 sleeps until a rank's message wakes it (a "
                                          "wake word shared by every rank)"
                                        : "idle, rank 0 polls every cycle (a rank on another host, "
                                          "or no shared memory)"));
  }
  if (rank() == 0) {
    from_workers_ = std::make_unique<CoordinatorMessages>(channel_, &clock_, std::move(offsets));
  } else {
    to_rank0_ = std::make_unique<WorkerMessages>(channel_, &clock_);
  }
  start_ns_ = clock_.now_ns();
  start_wall_us_ = std::chrono::duration_cast<std::chrono::microseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();

  host_ = world_->host_backend(&clock_, config_);
  device_ = world_->device_backend(&clock_, config_, wake_for_completions_);
  timeline_ = std::make_unique<TimelineRecorder>(rank(), size());
  timeline_->set_limits(config_.timeline_steps,
                        static_cast<uint64_t>(config_.timeline_max_mb * (1 << 20)),
                        static_cast<uint64_t>(config_.timeline_keep_files));
  timeline_->set_hold_steps(config_.timeline_on_alert);
  if (rank() == 0) {
    coordinator_ =
        std::make_unique<Coordinator>(size(), &timeline_->tensor_ids(),
                                      static_cast<size_t>(config_.cache_capacity), &sets_.table());
    inspector_ = std::make_unique<Inspector>(size(), config_, &peers_.hostnames);
    live_ = std::make_unique<LiveMonitor>(config_, size(), &peers_.hostnames);
  }
  finals_.assign(size(), 0);
  timeline_acks_.assign(size(), 0);

  // Rank 0's timeline settings hold for everyone, so that all ranks agree on what to ship.
  const TimelineSettings timeline =
      agree_timeline_settings(*channel_, config_, rank() == 0 ? &inspector_->lanes() : nullptr);
  timeline_all_ranks_ = timeline.all_ranks;
  timeline_->set_lanes_wanted(timeline.lanes_wanted);
  if (timeline.on) {
    bool opened = true;
    if (rank() == 0) {
      opened = timeline_
                   ->start(config_.timeline_filename, timeline.mark_cycles,
                           run_metadata(timeline.mark_cycles))
                   .ok();
    }
    opened = agree_timeline_opened(*channel_, opened);
    if (opened && rank() != 0) timeline_->start("", timeline.mark_cycles, {});
  }
  if (world_->handles_signals()) {
    signals_ = std::make_unique<SignalReport>(rank(), &queue_, timeline_.get(), &clock_);
  }
  liveness_ = std::make_unique<Liveness>(rank(), size(), config_.peer_timeout_s, &clock_);
  liveness_->start_watchdog(
      [this](const std::string& reason, int64_t now) { on_hang(reason, now); });
  thread_ = std::thread(&Runtime::loop, this);
}

Runtime::~Runtime() {
  signals_.reset();
  shutdown();
  if (hung()) return;  // the background thread still uses everything; the API leaks this object
  device_.reset();
  host_.reset();
}

timeline::RunMetadata Runtime::run_metadata(bool mark_cycles) const {
  timeline::RunMetadata m;
  m.ranks = size();
  m.hostnames = peers_.hostnames;
  m.pids = peers_.pids;
  m.local_ranks = peers_.local_ranks;
  m.local_sizes = peers_.local_sizes;
  m.cross_ranks = peers_.cross_ranks;
  m.cross_sizes = peers_.cross_sizes;
  m.start_time_since_epoch_us = start_wall_us_;
  m.start_ns = start_ns_;
  m.config = config_.describe();
  for (const auto& o : from_workers_->offsets()) {
    m.clock_offsets_us.push_back(o.offset_ns() / 1e3);
    m.clock_uncertainty_us.push_back(o.uncertainty_ns() / 1e3);
  }
  m.mark_cycles = mark_cycles;
  m.all_ranks = timeline_all_ranks_;
  m.timeline_ranks = config_.timeline_ranks.text;
  return m;
}

void Runtime::shutdown(const std::string& why) {
  queue_.request_shutdown(why);
  if (thread_.joinable()) {
    std::unique_lock<std::mutex> lock(loop_mutex_);
    loop_done_cv_.wait(lock, [&] { return loop_done_ || hung(); });
    const bool done = loop_done_;
    lock.unlock();
    if (done) {
      thread_.join();
    } else {
      thread_.detach();  // stuck in a collective that will never return
    }
  }
  liveness_->stop_watchdog();
}

std::vector<RankLateness> Runtime::lateness() const {
  if (rank() != 0) return {};
  return inspector_->lateness();
}

void Runtime::on_hang(const std::string& reason, int64_t now) {
  if (rank() == 0) {
    timeline_->instant_from_any_thread("PEER_TIMEOUT", reason, now);
    timeline_->close_from_any_thread();  // the background thread will not close it
  }
  queue_.fail_pending(reason);
  doom(reason);
  {
    std::lock_guard<std::mutex> done(loop_mutex_);  // shutdown() may be waiting for the loop
  }
  loop_done_cv_.notify_all();
}

// ---------------------------------------------------------------------------------------------
// Background loop

void Runtime::loop() {
  // Short sleeps must be short: the default 50 us timer slack would dominate them.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  const int64_t cpu_start_ns = thread_cpu_ns();
  // After any progress the loop polls for RANKTIME_SPIN_US (the next message of a synchronous
  // exchange usually arrives within it); idle ranks sleep up to RANKTIME_CYCLE_TIME_MS.
  Backoff backoff(config_.spin(), std::chrono::steady_clock::now());
  std::chrono::nanoseconds idle_cap(static_cast<int64_t>(config_.cycle_time_ms * 1e6));
  // Only rank 0 may have to poll every cycle when idle: without a wake word shared with every
  // rank (ranks on other hosts) it learns of the others' first tensor after an idle spell by
  // probing, so that tensor waits at most one cycle for it. With one, a worker's message wakes
  // it. The others learn of their own by the queue's wake-up, and rank 0 sends them nothing they
  // are not waiting for (their tensors' responses, a shutdown), so they sleep kWorkerIdleCycles
  // cycles.
  if (rank() != 0 || queue_.has_wake_word()) idle_cap *= kWorkerIdleCycles;
  if (liveness_->heartbeat_ns() > 0) {
    idle_cap = std::min(idle_cap, std::chrono::nanoseconds(liveness_->heartbeat_ns()));
  }
  while (true) {
    if (!queue_.begin_loop_step()) {
      // A user thread runs the steps (run()), and owns what they touch until it hands them back
      // (which ends this wait).
      queue_.wait(idle_cap, true);
      backoff.restart(std::chrono::steady_clock::now());
      continue;
    }
    // What the sleep depends on is read inside the step: afterwards a user thread may own it.
    const bool progressed = !finished_ && step();
    const bool finished = finished_, is_busy = !progressed && busy();
    const bool announced = shutdown_announced_;
    queue_.end_loop_step();
    if (finished) break;
    auto now = std::chrono::steady_clock::now();
    if (progressed) {
      backoff.restart(now);
      continue;
    }
    auto sleep = backoff.next(now, is_busy ? std::min(Backoff::kBusyCap, idle_cap) : idle_cap);
    // Woken early (a submission, or a worker's message that may take a moment to be seen by
    // the probe): poll again before sleeping long.
    if (sleep.count() > 0 && queue_.wait(sleep, announced)) backoff.restart(now);
  }
  // Sends to a lost rank may never complete: leave them.
  if (!peer_lost()) channel_->reap_sends(true);
  // Rank 0's is negotiation's cost in a real run (bench/rank0_cpu_bench.py reads it).
  RANKTIME_LOG(kDebug, "background thread CPU " << (thread_cpu_ns() - cpu_start_ns) / 1e6
                                                << " ms over " << timeline_->steps_marked()
                                                << " steps marked");
  {
    std::lock_guard<std::mutex> lock(loop_mutex_);
    loop_done_ = true;
  }
  loop_done_cv_.notify_all();
}

bool Runtime::step() {
  timeline_->record_steps();
  bool progressed = rank() == 0 ? coordinator_step() : worker_step();
  progressed = deliver_device() || progressed;
  if (!finished_) tend_peers();
  if (!progressed && !finished_) channel_->reap_sends(false);
  return progressed;
}

bool Runtime::busy() const {
  size_t device_pending = 0;
  if (has_device_backend()) each_device_backend([&](Backend& b) { device_pending += b.pending(); });
  return !in_flight_.empty() || (coordinator_ && coordinator_->pending() > 0) ||
         timeline_->outbox_size() > 0 || device_pending > 0;
}

std::vector<Request> Runtime::take_submitted() {
  std::vector<std::unique_ptr<TensorEntry>> batch;
  queue_.take(&batch);
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
    ResponseList list;
    int64_t arrival = 0;
    try {
      if (!to_rank0_->receive(&list, &arrival)) break;
    } catch (const WireError& e) {
      RANKTIME_LOG(kError, "corrupt response list from rank 0: " << e.what());
      fail_everything(std::string("corrupt response list from rank 0: ") + e.what());
      finished_ = true;
      return true;
    }
    liveness_->heard(0, arrival);
    execute(list, arrival);
    progressed = true;
    if (finished_) return true;
  }
  std::vector<Request> requests = take_submitted();
  const bool announce = !shutdown_announced_ && queue_.shutdown_requested(nullptr);
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

bool Runtime::coordinator_step() {
  bool progressed = false;
  bool added = false;
  while (receive_worker_message()) progressed = added = true;
  for (Request& q : take_submitted()) {
    if (uint32_t id = coordinator_->cached_id(q)) {
      coordinator_->add_cached(0, id, q.ready_ns, 0);
    } else {
      coordinator_->add(0, std::move(q));
    }
    // Progress, as on the other ranks: spin afresh for their requests instead of sleeping on
    // from where the backoff was when the submission woke this thread.
    progressed = added = true;
  }
  std::string self_shutdown;
  if (queue_.shutdown_requested(&self_shutdown)) {
    request_shutdown_everywhere(0, "rank 0 " + self_shutdown);
  }
  int64_t now = clock_.now_ns();
  ResponseList list;
  if (added) {
    negotiations_.clear();
    list.responses = coordinator_->take_ready(
        FusionOptions{config_.fusion_threshold, config_.fusion_max_tensor}, &negotiations_);
    now = clock_.now_ns();
    timeline_->negotiations(negotiations_, now);
    inspector_->add(negotiations_, now);
    live_->negotiations(negotiations_);
  }
  live_->tick(now, timeline_->steps_marked(), timeline_->last_mark_ns(), *inspector_, *coordinator_,
              timeline_.get());
  if (inspector_->due(now) && busy()) {
    if (auto reason = inspector_->inspect(now, *coordinator_, timeline_.get())) {
      request_shutdown_everywhere(0, std::move(*reason), /*fatal=*/true, /*stall=*/true);
    }
  }
  const bool shutdown_now = shutdown_from_ >= 0;
  if (list.responses.empty() && !shutdown_now) return progressed;

  list.cycle = ++cycle_;
  list.sent_ns = now;
  list.shutdown = shutdown_now;
  list.shutdown_reason = shutdown_reason_;
  list.fatal = shutdown_fatal_;
  list.stall = shutdown_stall_;
  list.cache_evicted = coordinator_->take_evicted();
  list.lane_ranks = inspector_->take_lane_change();
  timeline_->cycle(cycle_, now);
  broadcast(list);
  execute(list, now);
  inspector_->settle();  // after the responses: the replay does not delay them
  return true;
}

void Runtime::request_shutdown_everywhere(int from_rank, std::string reason, bool fatal,
                                          bool stall) {
  if (shutdown_from_ >= 0) return;  // the first reason stands
  shutdown_from_ = from_rank;
  shutdown_reason_ = std::move(reason);
  shutdown_fatal_ = fatal;
  shutdown_stall_ = stall;
}

void Runtime::doom(const std::string& reason, bool stall) {
  if (doomed_.exchange(true)) return;
  world_->doom(reason, stall ? std::chrono::milliseconds(
                                   static_cast<int64_t>(config_.stall_shutdown_s * 1000))
                             : std::chrono::milliseconds(0));
}

void Runtime::tend_peers() {
  if (!liveness_->enabled()) return;
  const int64_t now = clock_.now_ns();
  if (liveness_->heartbeat_due(now)) {
    if (rank() == 0) {
      ResponseList list;  // nothing to execute: "rank 0 is alive" (and a clock sample)
      list.cycle = cycle_;
      list.sent_ns = now;
      broadcast(list);
    } else {
      send_worker_message({}, false, false);
    }
  }
  auto loss = liveness_->check(now, peers_.hostnames, peers_.pids);
  if (!loss) return;
  if (rank() != 0) {
    fail_everything("ranktime has stopped: " + loss->reason);
    finished_ = true;
    doom(loss->reason);
    return;
  }
  timeline_->instant("PEER_LOST", loss->reason, now);
  request_shutdown_everywhere(loss->first_rank, loss->reason, /*fatal=*/true);
}

// ---------------------------------------------------------------------------------------------
// Control messages

void Runtime::send_worker_message(std::vector<Request> requests, bool final, bool timeline_ack) {
  WorkerMessage m;
  m.requests = std::move(requests);
  worker_cache_.split(&m.requests, &m);
  m.records = timeline_->take_outbox();
  m.region_names = timeline_->take_region_names();  // after the records: names every one of them
  m.regions_dropped = timeline_->regions_dropped();
  m.shutdown = shutdown_announced_;
  if (m.shutdown) queue_.shutdown_requested(&m.shutdown_why);
  m.final = final;
  m.timeline_ack = timeline_ack;
  to_rank0_->send(&m);
  liveness_->sent(clock_.now_ns());
}

void Runtime::broadcast(const ResponseList& list) {
  if (size() == 1) return;
  from_workers_->broadcast(list, liveness_->lost_ranks());
  liveness_->sent(clock_.now_ns());
}

bool Runtime::receive_worker_message() {
  int source = 0;
  int64_t now = 0;
  WorkerMessage* m = nullptr;
  if (!from_workers_->receive(&source, &now, &m)) return false;
  liveness_->heard(source, now);  // even a corrupt message says the rank is alive
  if (m == nullptr) return true;
  for (Request& q : m->requests) coordinator_->add(source, std::move(q));
  for (size_t i = 0; i < m->cached_ids.size(); ++i) {
    std::string error = coordinator_->add_cached(source, m->cached_ids[i], m->cached_ready_ns[i],
                                                 m->evictions_seen);
    if (!error.empty()) {
      // Not attributable to a tensor: the rank and rank 0 disagree about the protocol's state.
      RANKTIME_LOG(kError, error);
      request_shutdown_everywhere(source, std::move(error));
    }
  }
  timeline_->learn_regions(source, m->region_names, m->regions_dropped);
  if (!m->records.empty()) timeline_->ingest(&m->records, from_workers_->offset(source), source);
  if (m->shutdown) {
    request_shutdown_everywhere(
        source, "rank " + std::to_string(source) + " " +
                    (m->shutdown_why.empty() ? "called shutdown()" : m->shutdown_why));
  }
  if (m->final) ++finals_[source];
  if (m->timeline_ack) ++timeline_acks_[source];
  return true;
}

void Runtime::await_workers(const std::vector<int64_t>& counts, int64_t target, double timeout_s,
                            const char* what) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::nanoseconds(static_cast<int64_t>(timeout_s * 1e9));
  Backoff backoff(std::chrono::nanoseconds(0), std::chrono::steady_clock::now());
  while (true) {
    if (receive_worker_message()) {
      backoff.restart(std::chrono::steady_clock::now());
      continue;
    }
    tend_peers();  // a rank that died meanwhile is not waited for
    std::string missing;
    for (int r = 1; r < size(); ++r) {
      if (liveness_->lost(r)) continue;
      if (counts[r] < target) missing += (missing.empty() ? "" : ",") + std::to_string(r);
    }
    if (missing.empty()) return;
    if (std::chrono::steady_clock::now() > deadline) {
      RANKTIME_LOG(kWarning, "gave up waiting for " << what << " from ranks " << missing);
      return;
    }
    channel_->reap_sends(false);
    std::this_thread::sleep_for(backoff.next(std::chrono::steady_clock::now(), Backoff::kBusyCap));
  }
}

}  // namespace ranktime
