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

// Every append_* call appends its events to `out`, each as ",\n{...}" (the caller turns the
// file's first separator into "["), and returns how many events it appended.
class EventFormatter {
 public:
  // `strings` must outlive the formatter; it is read under its lock only for names not yet cached.
  EventFormatter(const StringTable& strings, int64_t start_ns);

  // The first events of a file: pid 0's names and the `ranktime_run` metadata.
  size_t append_run_metadata(const RunMetadata& metadata, TextBuffer* out);
  // The events of one record, preceded by the metadata of its tensor and lane the first time
  // they appear. An unknown record kind (corrupt bytes from a peer) appends nothing.
  size_t append_record(const Record& record, TextBuffer* out);
  // `ranktime_run_end`: the file's last event.
  size_t append_run_end(uint64_t events_written, uint64_t events_dropped,
                        const std::vector<double>& clock_offsets_us,
                        const std::vector<double>& clock_uncertainty_us, TextBuffer* out);

 private:
  struct TensorState {
    bool named = false;             // process metadata written
    std::vector<bool> lanes_named;  // by (uint16_t) rank: thread metadata written
  };

  // The lane's current fused batch (RecordKind::kBatch and its kBatchSpan records).
  struct LaneBatch {
    Record header;  // kind kBatch once a batch was seen on the lane
    std::vector<Record> spans;
    // Rendered on the batch's first tensor: every event's text, the same for all its tensors
    // but for the pid (inserted at each cut) and the operation's args (at the second cut).
    bool rendered = false;
    TextBuffer text;
    std::vector<size_t> cuts;
  };

  // The string with id `id`, escaped and quoted, cached after its first use.
  const std::string& quoted(uint32_t id);
  const std::string& quoted_phase(Phase phase) const;
  // The quoted error message with id `error_string`, or "" for 0 (no error).
  const std::string& error_text(uint32_t error_string);
  void add_to_batch(const Record& record);
  void render_batch(LaneBatch* batch);
  size_t append_batch_tensor(const Record& record, TextBuffer* out);
  size_t append_negotiation(const Record& record, TextBuffer* out);
  TensorState& tensor_state(uint32_t tensor);
  size_t name_tensor(uint32_t tensor, TextBuffer* out);
  size_t name_lane(uint32_t tensor, int16_t rank, TextBuffer* out);
  const StringTable& strings_;
  const int64_t start_ns_;
  // Caches indexed by string id (ids are dense); ids the table had not given out when first seen
  // (corrupt records) go to the sparse maps instead of growing the vectors.
  std::vector<std::string> quoted_;
  std::vector<bool> quoted_known_;
  std::vector<TensorState> tensors_;
  std::unordered_map<uint32_t, TensorState> sparse_tensors_;
  std::string quoted_unknown_ = "\"\"";
  const std::string no_error_;
  std::vector<LaneBatch> batches_;  // by (uint16_t) rank
  std::vector<std::string> quoted_phases_;
};

}  // namespace ranktime::timeline
