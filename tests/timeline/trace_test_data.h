// What the timeline tests feed the formatter and the writer (Records, run metadata) and the
// JSON they expect back, shared by the formatter tests and the writer tests.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ranktime/timeline/record.h"
#include "ranktime/timeline/run_metadata.h"

namespace ranktime::timeline::test {

using nlohmann::json;

// Rank 0's clock at the run start in two_rank_metadata() (and the formatter tests' start).
inline constexpr int64_t kStartNs = 7'000'000'000;

inline RunMetadata two_rank_metadata() {
  RunMetadata m;
  m.ranks = 2;
  m.hostnames = {"n1", "n1"};
  m.pids = {411, 412};
  m.start_time_since_epoch_us = 1795000000000000;
  m.start_ns = kStartNs;
  m.config = {{"RANKTIME_CYCLE_TIME_MS", "5"}, {"TIMELINE_MARK_CYCLES", "0"}};
  m.clock_offsets_us = {0, -0.4};
  m.clock_uncertainty_us = {0, 1.1};
  m.mark_cycles = false;
  m.all_ranks = true;
  m.local_ranks = {0, 1};
  m.local_sizes = {2, 2};
  m.cross_ranks = {0, 0};
  m.cross_sizes = {1, 1};
  return m;
}

// The events a file with two_rank_metadata() opens with: pid 0's names, then the `ranktime_run`
// instant at the run start.
inline std::vector<json> two_rank_metadata_events() {
  return {
      json::parse(R"({"name":"process_name","ph":"M","pid":0,"tid":0,
                      "args":{"name":"ranktime"}})"),
      json::parse(R"({"name":"process_sort_index","ph":"M","pid":0,"tid":0,
                      "args":{"sort_index":-1}})"),
      json::parse(R"({"name":"thread_name","ph":"M","pid":0,"tid":0,
                      "args":{"name":"cycles"}})"),
      json::parse(R"({"name":"ranktime_run","ph":"i","pid":0,"tid":0,"ts":0.0,"args":{
          "ranks":2,"hostnames":["n1","n1"],"pids":[411,412],
          "local_ranks":[0,1],"local_sizes":[2,2],"cross_ranks":[0,0],"cross_sizes":[1,1],
          "start_time_since_epoch_in_micros":1795000000000000,
          "config":{"RANKTIME_CYCLE_TIME_MS":"5","TIMELINE_MARK_CYCLES":"0"},
          "clock_offsets_us":[0,-0.4],"clock_uncertainty_us":[0,1.1],
          "mark_cycles":false,"all_ranks":true,"file_index":0,"timeline_ranks":"",
          "clock_zero_ns":7000000000}})"),
  };
}

// The `ranktime_run_end` that closes a file of 5 events opened with two_rank_metadata() and
// holding nothing after the run start.
inline json two_rank_run_end_event() {
  return json::parse(R"({"name":"ranktime_run_end","ph":"i","pid":0,"tid":0,"ts":0.0,
      "args":{"events_written":5,"events_dropped":0,
              "clock_offsets_us":[0,-0.4],"clock_uncertainty_us":[0,1.1]}})");
}

// The M names that both Chrome's trace viewer and Perfetto know; a file has no others.
inline bool is_known_metadata_name(const std::string& name) {
  return name == "process_name" || name == "process_sort_index" || name == "thread_name" ||
         name == "thread_sort_index";
}

// Record builders; times are microseconds after the run start (converted to ns on rank 0's clock).
inline int64_t at_us(double us) { return kStartNs + static_cast<int64_t>(us * 1000.0 + 0.5); }

inline Record op_begin(uint32_t tensor, int16_t rank, int64_t ts_ns,
                       Phase phase = Phase::kAllreduce, uint8_t dtype = 6,
                       std::vector<int64_t> dims = {64, 64, 1, 1}, int64_t bytes = 16384,
                       uint16_t fused = 1) {
  Record r;
  r.kind = RecordKind::kOpBegin;
  r.tensor = tensor;
  r.rank = rank;
  r.ts_ns = ts_ns;
  r.phase = phase;
  r.args.op.dtype = dtype;
  r.args.op.ndim = static_cast<uint8_t>(dims.size());
  r.args.op.fused_tensors = fused;
  r.args.op.bytes = bytes;
  for (size_t d = 0; d < dims.size() && d < static_cast<size_t>(kMaxInlineDims); ++d) {
    r.args.op.dims[d] = dims[d];
  }
  return r;
}

inline Record op_end(uint32_t tensor, int16_t rank, int64_t ts_ns, Phase phase = Phase::kAllreduce,
                     uint32_t error_string = 0) {
  Record r;
  r.kind = RecordKind::kOpEnd;
  r.tensor = tensor;
  r.rank = rank;
  r.ts_ns = ts_ns;
  r.phase = phase;
  r.args.op.error_string = error_string;
  return r;
}

inline Record span(uint32_t tensor, int16_t rank, Phase phase, int64_t begin_ns, int64_t end_ns) {
  Record r;
  r.kind = RecordKind::kSpan;
  r.tensor = tensor;
  r.rank = rank;
  r.phase = phase;
  r.ts_ns = begin_ns;
  r.end_ns = end_ns;
  return r;
}

inline Record negotiate_begin(uint32_t tensor, int64_t ts_ns,
                              Phase phase = Phase::kNegotiateAllreduce) {
  Record r;
  r.kind = RecordKind::kNegotiateBegin;
  r.tensor = tensor;
  r.ts_ns = ts_ns;
  r.phase = phase;
  return r;
}

inline Record tick(uint32_t tensor, int32_t rank, int64_t ts_ns, int64_t lag_ns) {
  Record r;
  r.kind = RecordKind::kTick;
  r.tensor = tensor;
  r.ts_ns = ts_ns;
  r.args.tick.rank = rank;
  r.args.tick.lag_ns = lag_ns;
  return r;
}

inline Record negotiate_end(uint32_t tensor, int64_t ts_ns, int32_t last_rank, int64_t spread_ns,
                            uint32_t error_string = 0, Phase phase = Phase::kNegotiateAllreduce) {
  Record r;
  r.kind = RecordKind::kNegotiateEnd;
  r.tensor = tensor;
  r.ts_ns = ts_ns;
  r.phase = phase;
  r.args.negotiate.last_rank = last_rank;
  r.args.negotiate.spread_ns = spread_ns;
  r.args.negotiate.error_string = error_string;
  return r;
}

inline Record cycle(int64_t ts_ns, int64_t number) {
  Record r;
  r.kind = RecordKind::kCycle;
  r.ts_ns = ts_ns;
  r.args.cycle.cycle = number;
  return r;
}

inline Record instant(int64_t ts_ns, uint32_t name, uint32_t message) {
  Record r;
  r.kind = RecordKind::kInstant;
  r.ts_ns = ts_ns;
  r.args.instant.name_string = name;
  r.args.instant.message_string = message;
  return r;
}

inline Record step(int16_t rank, int64_t number, int64_t begin_ns, int64_t end_ns) {
  return step_record(rank, number, begin_ns, end_ns);
}

inline Record counter(int64_t ts_ns, uint32_t name, int32_t series, double value) {
  Record r;
  r.kind = RecordKind::kCounter;
  r.ts_ns = ts_ns;
  r.args.counter.name_string = name;
  r.args.counter.series = series;
  r.args.counter.value = value;
  return r;
}

// Sub-phases as (phase, (begin ns, end ns)).
using SpanList = std::vector<std::pair<Phase, std::pair<int64_t, int64_t>>>;

// A fused batch on lane `rank`: its header, its sub-phases and one record per tensor.
inline std::vector<Record> batch(int16_t rank, Phase phase, int64_t arrival_ns, int64_t start_ns,
                                 int64_t end_ns, const SpanList& spans,
                                 const std::vector<Record>& tensors, uint32_t error_string = 0) {
  Record header = span(0, rank, phase, arrival_ns, end_ns);
  header.kind = RecordKind::kBatch;
  header.args.batch = {static_cast<uint16_t>(spans.size()), static_cast<uint16_t>(tensors.size()),
                       error_string, start_ns};
  std::vector<Record> records = {header};
  for (const auto& [span_phase, times] : spans) {
    records.push_back(span(0, rank, span_phase, times.first, times.second));
    records.back().kind = RecordKind::kBatchSpan;
  }
  for (Record t : tensors) {
    t.kind = RecordKind::kBatchTensor;
    t.rank = rank;
    t.ts_ns = 0;
    records.push_back(t);
  }
  return records;
}

// A negotiation of `tensor` as one record: rank ranks[i] ready at ready_ns[i] (in readiness
// order), from `begin_ns` to `end_ns`.
inline Record negotiation(uint32_t tensor, int64_t begin_ns, int64_t end_ns,
                          const std::vector<std::pair<int32_t, int64_t>>& ready,
                          uint32_t error_string = 0, Phase phase = Phase::kNegotiateAllreduce) {
  Record r = negotiate_begin(tensor, begin_ns, phase);
  r.kind = RecordKind::kNegotiation;
  r.end_ns = end_ns;
  r.args.negotiation.error_string = error_string;
  r.args.negotiation.ticks = static_cast<uint16_t>(ready.size());
  for (size_t i = 0; i < ready.size() && i < static_cast<size_t>(kMaxInlineTicks); ++i) {
    r.args.negotiation.rank[i] = ready[i].first;
    r.args.negotiation.ready_ns[i] = ready[i].second;
  }
  return r;
}

// One training step's records as rank 0's runtime pushes them: a cycle marker, each tensor's
// negotiation (rank r ready 30 us x r late), every rank's step mark and its fused batches of up
// to 4 tensors (QUEUE, a copy in, the collective, a copy out), from `t0` on.
inline std::vector<Record> training_step(const std::vector<uint32_t>& tensors, int ranks,
                                         int64_t number, int64_t t0) {
  std::vector<Record> records = {cycle(t0, number + 1)};
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int64_t ready = t0 + 1'000 * static_cast<int64_t>(i);
    std::vector<std::pair<int32_t, int64_t>> ticks;
    for (int r = 0; r < ranks; ++r) ticks.emplace_back(r, ready + 30'000 * r);
    records.push_back(negotiation(tensors[i], ready, ready + 30'000 * ranks, ticks));
  }
  const int64_t begin = t0 + 1'000 * static_cast<int64_t>(tensors.size()) + 30'000 * ranks;
  for (int r = ranks - 1; r >= 0; --r) {  // other ranks' lanes arrive first
    const auto rank = static_cast<int16_t>(r);
    records.push_back(step(rank, number, t0 + 7'000 * r, t0 + 10'000'000 + 7'000 * r));
    for (size_t first = 0; first < tensors.size(); first += 4) {
      const int64_t b = begin + 100'000 * static_cast<int64_t>(first) + 1'000 * r;
      std::vector<Record> fused;
      for (size_t i = first; i < first + 4 && i < tensors.size(); ++i) {
        fused.push_back(op_begin(tensors[i], rank, 0, Phase::kAllreduce, 6,
                                 {64, static_cast<int64_t>(i)}, 256 * static_cast<int64_t>(i), 0));
      }
      const SpanList spans = {{Phase::kMemcpyInFusionBuffer, {b + 5'000, b + 9'000}},
                              {Phase::kMpiAllreduce, {b + 9'000, b + 60'000}},
                              {Phase::kMemcpyOutFusionBuffer, {b + 60'000, b + 64'000}}};
      const std::vector<Record> one =
          batch(rank, Phase::kAllreduce, b, b + 5'000, b + 64'000, spans, fused);
      records.insert(records.end(), one.begin(), one.end());
    }
  }
  return records;
}

// JSON helpers over a parsed trace (a file's array, or the formatter's events).
inline bool is_run_metadata(const json& e) {
  return e.at("ph") == "i" &&
         (e.at("name") == "ranktime_run" || e.at("name") == "ranktime_run_end");
}

// The events of a trace but its metadata (M events and the run's instants).
inline std::vector<json> events_other_than_metadata(const json& trace) {
  std::vector<json> events;
  for (const json& e : trace) {
    if (e.at("ph") != "M" && !is_run_metadata(e)) events.push_back(e);
  }
  return events;
}

inline std::vector<json> events_named(const json& trace, const std::string& name) {
  std::vector<json> events;
  for (const json& e : trace) {
    if (e.at("name") == name) events.push_back(e);
  }
  return events;
}

inline std::vector<json> metadata_named(const json& trace, const std::string& name) {
  std::vector<json> events;
  for (const json& e : trace) {
    if (e.at("ph") == "M" && e.at("name") == name) events.push_back(e);
  }
  return events;
}

}  // namespace ranktime::timeline::test
