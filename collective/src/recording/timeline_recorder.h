// The collective side of the timeline: turns negotiations, executed responses and cycles into
// timeline Records. On rank 0 they go to the TraceWriter; on other ranks they wait in an outbox
// that the background loop ships to rank 0 with its next message.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/config.h"
#include "core/tensor_entry.h"
#include "negotiation/coordinator.h"
#include "ranktime/timeline/trace_writer.h"
#include "recording/region_log.h"

namespace ranktime {

// Tensor ids are the timeline's string ids: the writer resolves a record's tensor by its id.
class StringTableIds final : public TensorIds {
 public:
  explicit StringTableIds(timeline::StringTable* table) : table_(table) {}
  uint32_t id_of(std::string_view name) override { return table_->intern(name); }

 private:
  timeline::StringTable* table_;
};

class TimelineRecorder {
 public:
  TimelineRecorder(int rank, int size);
  ~TimelineRecorder();

  // Ids of tensor names in this recorder's string table: rank 0's Coordinator assigns them.
  TensorIds& tensor_ids() { return tensor_ids_; }

  // Starts recording (a new file on rank 0). `metadata` is used on rank 0 only.
  Status start(const std::string& path, bool mark_cycles, const timeline::RunMetadata& metadata);
  // Stops recording; rank 0 closes its file (call once other ranks' last records are in).
  void stop();

  // From TIMELINE_STEPS, TIMELINE_MAX_MB and TIMELINE_KEEP_FILES; before start().
  void set_limits(const StepWindow& steps, uint64_t max_bytes, uint64_t keep_files);

  // Any thread: this rank starts step `step` (none: the one after its last, from 0) at `now_ns`
  // on its clock. Kept whether or not recording is on (a window needs the current step).
  void mark_step(std::optional<int64_t> step, int64_t now_ns);
  // Background thread: step records for the steps whose end the marks since the last call made
  // known (a step ends at the next mark); with `end_ns`, the open step too, ending there (before
  // a stop or the last message). Also records the regions ended since the last call.
  void record_steps(std::optional<int64_t> end_ns = std::nullopt);

  // Any thread: the step a region beginning now belongs to (the last marked; -1: none yet).
  int64_t current_step() const { return current_step_.load(std::memory_order_relaxed); }
  // Any thread: this rank's region `name`, begun in step `step` (TIMELINE_STEPS), ran from
  // `begin_ns` to `end_ns` (its clock) with `blocked_ns` of it blocked inside ranktime. Kept,
  // while recording is on, in a bounded log that the background thread drains (the oldest is
  // dropped, and counted, when it is full); never blocks on shipping.
  void region(std::string_view name, int64_t step, int64_t begin_ns, int64_t end_ns,
              int64_t blocked_ns);
  // Other ranks, background thread: the region names to ship with the next message (those not
  // shipped yet), and the regions this rank has dropped so far.
  std::vector<std::string> take_region_names() { return region_names_.take_new(); }
  uint64_t regions_dropped() const { return regions_.dropped(); }
  // Rank 0: what rank `source` shipped besides its records: its next region names and the
  // regions it has dropped so far.
  void learn_regions(int source, const std::vector<std::string>& names, uint64_t dropped);

  // Background thread: whether rank 0 wants this rank's processing lanes (TIMELINE_RANKS,
  // TIMELINE_ALL_RANKS); kept across start() and stop(). Rank 0's own are always wanted.
  void set_lanes_wanted(bool wanted) { lanes_wanted_ = wanted; }
  // The same from a response list's `lane_ranks` (the ranks wanted, rank 0 first).
  void set_lane_ranks(const std::vector<int32_t>& ranks);

  bool on() const { return on_; }
  bool mark_cycles() const { return on_ && mark_cycles_; }
  // Whether this rank records its processing lanes.
  bool lanes_on() const { return on_ && (rank_ == 0 || lanes_wanted_); }
  // Steps marked on this rank so far (mark_step()), whether or not recording is on.
  int64_t steps_marked() const { return current_step_.load(std::memory_order_relaxed) + 1; }

  // Rank 0: negotiations finished in one cycle, known complete at `known_ns` (one push).
  void negotiations(const std::vector<Negotiation>& done, int64_t known_ns);
  void cycle(int64_t cycle, int64_t now_ns);
  void instant(const std::string& name, const std::string& message, int64_t now_ns);
  // Rank 0, from any thread (the signal watcher, the peer watchdog), even while the background
  // loop is blocked in a collective: an instant event, if a file is open.
  void instant_from_any_thread(const std::string& name, const std::string& message, int64_t now_ns);
  // Rank 0, from any thread: completes the file (what was pushed, the closing metadata and
  // bracket) while the background loop is stuck; later records are dropped.
  void close_from_any_thread();
  // Rank 0: one sample of counter track `name`, series `series` (written as "rank <series>").
  void counter(const char* name, int series, double value, int64_t now_ns);
  // This rank executed `response` for `entries`: the response arrived at `arrival_ns`,
  // execution ran from `start_ns` to `end_ns` with the sub-phases in `log` (or, per tensor, in
  // (*entry_logs)[i] when the GPU path timed tensors of a batch apart).
  void processed(const Response& response, const std::vector<TensorEntry*>& entries,
                 int64_t arrival_ns, int64_t start_ns, int64_t end_ns, const PhaseLog& log,
                 const Status& status, const std::vector<PhaseLog>* entry_logs = nullptr);
  // Rank 0: records shipped by rank `source`, converted to rank 0's clock with `offset` (and its
  // region name ids to the trace's). The records are converted in place.
  void ingest(std::vector<timeline::Record>* records, const OffsetEstimator& offset, int source);
  // Other ranks: the records recorded since the last call.
  std::vector<timeline::Record> take_outbox();
  size_t outbox_size() const { return outbox_.size(); }
  int64_t outbox_oldest_ns() const { return outbox_.empty() ? 0 : outbox_.front().ts_ns; }

  void set_clock_offsets(std::vector<double> offsets_us, std::vector<double> uncertainty_us);
  uint64_t dropped() const;

 private:
  void emit(const timeline::Record& r);
  // In order, under one lock; what does not fit is dropped from the end (and counted).
  void emit(const timeline::Record* records, size_t n);
  timeline::Record instant_record(const std::string& name, const std::string& message,
                                  int64_t now_ns);
  // Appends the records of one negotiation to batch_.
  void add_negotiation(const Negotiation& n, int64_t known_ns);
  // Lanes, negotiations and ticks are recorded in this rank's current step (TIMELINE_STEPS).
  bool in_window() const { return steps_.contains(current_step_.load(std::memory_order_relaxed)); }

  // Moves the regions ended since the last call into the trace (rank 0) or the outbox.
  void record_regions();
  void update_regions_dropped();
  // Rank 0: `source`'s regions in `records` (converted) begin after its earlier ones ended.
  void keep_regions_in_order(std::vector<timeline::Record>* records, int source);

  int rank_;
  std::atomic<bool> on_{false};  // read by user threads (region())
  bool mark_cycles_ = false;
  bool lanes_wanted_ = true;
  StepWindow steps_;
  uint64_t max_bytes_ = 0;
  uint64_t keep_files_ = 0;
  // Step marks: from user threads, taken by the background thread.
  std::mutex marks_mutex_;
  std::vector<std::pair<int64_t, int64_t>> marks_;  // (step, ns) not yet taken
  std::atomic<bool> marks_waiting_{false};
  std::atomic<int64_t> current_step_{-1};                 // the last step marked; -1: none yet
  int64_t next_step_ = 0;                                 // under marks_mutex_
  std::optional<std::pair<int64_t, int64_t>> open_step_;  // background thread: (step, begin ns)
  timeline::StringTable strings_;
  StringTableIds tensor_ids_{&strings_};
  // Rank 0. Replaced only by the background thread, under writer_mutex_; other threads use it
  // under the mutex, the background thread without.
  std::unique_ptr<timeline::TraceWriter> writer_;
  std::mutex writer_mutex_;
  std::vector<timeline::Record> outbox_;  // other ranks
  uint64_t outbox_dropped_ = 0;
  std::vector<int64_t> last_negotiation_end_;   // per tensor id: keeps each lane ordered
  std::vector<std::pair<int64_t, int>> ticks_;  // scratch: (ready time, rank)
  std::vector<timeline::Record> batch_;         // scratch: one call's records
  // Regions: ended by user threads, taken by the background thread.
  RegionLog regions_;
  RegionNames region_names_;
  RegionNameMap region_ids_;                 // rank 0: every rank's names
  std::vector<uint64_t> regions_dropped_;    // rank 0: by rank, as each last reported
  std::vector<int64_t> regions_end_;         // rank 0: by rank, the latest region end written
  std::vector<RegionEntry> region_scratch_;  // background thread
};

}  // namespace ranktime
