// EventFormatter: turns timeline Records into Chrome-trace JSON events, the text half of the
// TraceWriter (docs/timeline-format.md). Owned and used by one thread, the writer's.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "ranktime/timeline/record.h"
#include "ranktime/timeline/run_metadata.h"
#include "ranktime/timeline/string_table.h"
#include "text_buffer.h"

namespace ranktime::timeline {

// What a file's closing `ranktime_run_end` says.
struct RunEnd {
  uint64_t events_written = 0;  // events in this file, the run end included
  uint64_t events_dropped = 0;  // records dropped in the run so far
  // Regions dropped in the run so far, every rank's (a rank recorded them faster than they could
  // be shipped); written only when not 0.
  uint64_t regions_dropped = 0;
  std::vector<double> clock_offsets_us;
  std::vector<double> clock_uncertainty_us;
  std::string next_file;  // where recording goes on (a size budget rotated it); empty: none
};

// Every append_* call appends its events to `out`, each as ",\n{...}" (the caller turns the
// file's first separator into "["), and returns how many events it appended.
//
// Slices are complete (`X`) events, written once their end is known: a record that begins a
// slice (kOpBegin, kNegotiateBegin) is held until the record that ends it. Within a file, each
// lane's operation arguments are written when they change, a fused batch's sub-phases once (in
// its first tensor's slice), and a tick's lag only where its position does not tell it.
class EventFormatter {
 public:
  // `strings` must outlive the formatter; it is read under its lock only for names not yet cached.
  EventFormatter(const StringTable& strings, int64_t start_ns);

  // The first events of a file: pid 0's names and the `ranktime_run` instant at `at_ns` (rank 0's
  // clock), `file_index` counting the files of a size budget's rotation from 0.
  size_t append_run_metadata(const RunMetadata& metadata, int64_t at_ns, uint64_t file_index,
                             TextBuffer* out);
  // The events of one record, preceded by the metadata of its tensor and lane the first time
  // they appear in the file. An unknown record kind (corrupt bytes from a peer) appends nothing.
  size_t append_record(const Record& record, TextBuffer* out);
  // `ranktime_run_end`, an instant at the file's latest time: the file's last event.
  size_t append_run_end(const RunEnd& end, TextBuffer* out);

  // A new file starts: what the previous one was told (names, a lane's arguments, a batch's
  // sub-phases, arrows waiting for their end) is told again; slices still open carry over.
  void start_file();
  // The latest time (rank 0's clock) that the file's events reach so far.
  int64_t latest_ns() const { return latest_ns_; }

 private:
  struct LaneState {
    bool named = false;    // thread metadata written
    uint64_t op_args = 0;  // key of the dtype/shape/bytes last written on the lane; 0: none
  };
  struct TensorState {
    bool named = false;            // process metadata written
    std::vector<LaneState> lanes;  // by (uint16_t) rank
    // A flow arrow waits for rank 0's operation slice: from the last tick of the tensor's
    // latest negotiation, at flow_from_ns.
    bool flow_pending = false;
    int64_t flow_from_ns = 0;
  };

  // The lane's current fused batch (RecordKind::kBatch and its kBatchSpan records).
  struct LaneBatch {
    Record header;  // kind kBatch once a batch was seen on the lane
    std::vector<Record> spans;
    bool subphases_written = false;  // in this file, by the first of its tensors written here
    // Rendered on the batch's first tensor: the operation slice and its sub-phases, the same for
    // every tensor but for the pid (inserted at cut 0 and at each cut from 3 on) and the
    // arguments (cut 1); cut 2 ends the operation slice.
    bool rendered = false;
    TextBuffer text;
    std::vector<size_t> cuts;
  };

  // A slice whose begin came without its end yet (kOpBegin and its kSpans on a lane;
  // kNegotiateBegin and its kTicks on a tensor's negotiate thread).
  struct OpenSlice {
    bool open = false;
    Record begin;
    std::vector<Record> inner;
  };

  // The string with id `id`, escaped and quoted, cached after its first use.
  const std::string& quoted(uint32_t id);
  const std::string& quoted_phase(Phase phase) const;
  // The quoted error message with id `error_string`, or "" for 0 (no error).
  const std::string& error_text(uint32_t error_string);
  void note_time(int64_t ns) { latest_ns_ = ns > latest_ns_ ? ns : latest_ns_; }

  void add_to_batch(const Record& record);
  void render_batch(LaneBatch* batch);
  size_t append_batch_tensor(const Record& record, TextBuffer* out);
  size_t append_operation(const OpenSlice& op, const Record& end, TextBuffer* out);
  size_t append_negotiation(const Record& record, TextBuffer* out);
  size_t append_negotiation(const OpenSlice& begin, const Record& end, TextBuffer* out);
  size_t append_step(const Record& record, TextBuffer* out);
  size_t append_region(const Record& record, TextBuffer* out);
  // The flow arrow into rank 0's operation slice of `tensor` beginning at `op_ns`, if one waits.
  size_t append_flow(uint32_t tensor, int64_t op_ns, TextBuffer* out);
  TensorState& tensor_state(uint32_t tensor);
  size_t name_tensor(uint32_t tensor, TextBuffer* out);
  size_t name_lane(uint32_t tensor, int16_t rank, TextBuffer* out);

  const StringTable& strings_;
  const int64_t start_ns_;
  int64_t latest_ns_;
  uint64_t flows_ = 0;  // flow ids given out (unique across the writer's files)
  // Caches indexed by string id (ids are dense); ids the table had not given out when first seen
  // (corrupt records) go to the sparse maps instead of growing the vectors.
  std::vector<std::string> quoted_;
  std::vector<bool> quoted_known_;
  std::vector<TensorState> tensors_;
  std::unordered_map<uint32_t, TensorState> sparse_tensors_;
  std::string quoted_unknown_ = "\"\"";
  const std::string no_error_;
  std::vector<LaneBatch> batches_;                             // by (uint16_t) rank
  std::vector<OpenSlice> open_operations_;                     // by (uint16_t) rank
  std::unordered_map<uint32_t, OpenSlice> open_negotiations_;  // by tensor
  std::vector<bool> step_threads_named_;                       // by rank
  std::vector<bool> region_threads_named_;                     // by rank
  std::vector<std::string> quoted_phases_;
};

}  // namespace ranktime::timeline
