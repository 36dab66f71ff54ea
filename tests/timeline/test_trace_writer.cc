// TraceWriter tests: push records, read the file back with nlohmann_json, check it against
// docs/timeline-format.md.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "ranktime/timeline/record.h"
#include "ranktime/timeline/string_table.h"
#include "ranktime/timeline/trace_writer.h"

namespace ranktime::timeline {
namespace {

using nlohmann::json;

constexpr int64_t kStartNs = 7'000'000'000;

// A fresh directory under /tmp per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/ranktime_writer_test_XXXXXX";
    const char* made = mkdtemp(pattern);
    if (made == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = made;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Parses the whole file; throws (failing the test) unless it is one complete JSON document.
json read_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return json::parse(in);
}

RunMetadata two_rank_metadata() {
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
  return m;
}

TraceWriterOptions options_for(const std::string& path) {
  TraceWriterOptions options;
  options.path = path;
  options.capacity_records = 1 << 14;
  options.flush_interval = std::chrono::hours(1);  // the tests flush explicitly
  return options;
}

std::unique_ptr<TraceWriter> open_or_fail(const TraceWriterOptions& options,
                                          const StringTable& strings,
                                          const RunMetadata& metadata = two_rank_metadata()) {
  std::string error;
  auto writer = TraceWriter::open(options, metadata, strings, &error);
  if (!writer) throw std::runtime_error("open failed: " + error);
  return writer;
}

// Record builders; times are microseconds after the run start (converted to ns on rank 0's clock).
int64_t at_us(double us) { return kStartNs + static_cast<int64_t>(us * 1000.0 + 0.5); }

Record op_begin(uint32_t tensor, int16_t rank, int64_t ts_ns, Phase phase = Phase::kAllreduce,
                uint8_t dtype = 6, std::vector<int64_t> dims = {64, 64, 1, 1},
                int64_t bytes = 16384, uint16_t fused = 1) {
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

Record op_end(uint32_t tensor, int16_t rank, int64_t ts_ns, Phase phase = Phase::kAllreduce,
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

Record span(uint32_t tensor, int16_t rank, Phase phase, int64_t begin_ns, int64_t end_ns) {
  Record r;
  r.kind = RecordKind::kSpan;
  r.tensor = tensor;
  r.rank = rank;
  r.phase = phase;
  r.ts_ns = begin_ns;
  r.end_ns = end_ns;
  return r;
}

Record negotiate_begin(uint32_t tensor, int64_t ts_ns, Phase phase = Phase::kNegotiateAllreduce) {
  Record r;
  r.kind = RecordKind::kNegotiateBegin;
  r.tensor = tensor;
  r.ts_ns = ts_ns;
  r.phase = phase;
  return r;
}

Record tick(uint32_t tensor, int32_t rank, int64_t ts_ns, int64_t lag_ns) {
  Record r;
  r.kind = RecordKind::kTick;
  r.tensor = tensor;
  r.ts_ns = ts_ns;
  r.args.tick.rank = rank;
  r.args.tick.lag_ns = lag_ns;
  return r;
}

Record negotiate_end(uint32_t tensor, int64_t ts_ns, int32_t last_rank, int64_t spread_ns,
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

Record cycle(int64_t ts_ns, int64_t number) {
  Record r;
  r.kind = RecordKind::kCycle;
  r.ts_ns = ts_ns;
  r.args.cycle.cycle = number;
  return r;
}

Record instant(int64_t ts_ns, uint32_t name, uint32_t message) {
  Record r;
  r.kind = RecordKind::kInstant;
  r.ts_ns = ts_ns;
  r.args.instant.name_string = name;
  r.args.instant.message_string = message;
  return r;
}

Record counter(int64_t ts_ns, uint32_t name, int32_t series, double value) {
  Record r;
  r.kind = RecordKind::kCounter;
  r.ts_ns = ts_ns;
  r.args.counter.name_string = name;
  r.args.counter.series = series;
  r.args.counter.value = value;
  return r;
}

std::vector<json> events_other_than_metadata(const json& trace) {
  std::vector<json> events;
  for (const json& e : trace) {
    if (e.at("ph") != "M") events.push_back(e);
  }
  return events;
}

// Sub-phases as (phase, (begin ns, end ns)).
using SpanList = std::vector<std::pair<Phase, std::pair<int64_t, int64_t>>>;

// A fused batch on lane `rank`: its header, its sub-phases and one record per tensor.
std::vector<Record> batch(int16_t rank, Phase phase, int64_t arrival_ns, int64_t start_ns,
                          int64_t end_ns, const SpanList& spans, const std::vector<Record>& tensors,
                          uint32_t error_string = 0) {
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

std::vector<json> events_of(const std::vector<Record>& records, const StringTable& strings,
                            const TempDir& dir, const std::string& name) {
  auto writer = open_or_fail(options_for(dir.file(name)), strings);
  for (const Record& r : records) writer->push(r);
  writer->close();
  return events_other_than_metadata(read_trace(dir.file(name)));
}

std::vector<json> metadata_named(const json& trace, const std::string& name) {
  std::vector<json> events;
  for (const json& e : trace) {
    if (e.at("ph") == "M" && e.at("name") == name) events.push_back(e);
  }
  return events;
}

// Every number of the file with the key it belongs to, as written (the lexeme), so the tests can
// check the format of "ts" and friends rather than only their value.
class NumberLexemes : public nlohmann::json_sax<json> {
 public:
  std::vector<std::pair<std::string, std::string>> numbers;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t value) override {
    numbers.emplace_back(key_, std::to_string(value));
    return true;
  }
  bool number_unsigned(number_unsigned_t value) override {
    numbers.emplace_back(key_, std::to_string(value));
    return true;
  }
  bool number_float(number_float_t, const string_t& lexeme) override {
    numbers.emplace_back(key_, lexeme);
    return true;
  }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t& key) override {
    key_ = key;
    return true;
  }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  std::string key_;
};

NumberLexemes number_lexemes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  NumberLexemes lexemes;
  EXPECT_TRUE(json::sax_parse(in, &lexemes));
  return lexemes;
}

// ---------------------------------------------------------------------------------------------

TEST(TraceWriter, OpenWritesRunMetadataAndCloseWritesRunEnd) {
  TempDir dir;
  StringTable strings;
  RunMetadata metadata = two_rank_metadata();
  auto writer = open_or_fail(options_for(dir.file("t.json")), strings, metadata);

  // The header is on disk as soon as open() returns.
  const json opened = read_trace(dir.file("t.json"));
  ASSERT_EQ(opened.size(), 4u);
  EXPECT_EQ(opened[0], json::parse(R"({"name":"process_name","ph":"M","pid":0,"tid":0,
                                       "args":{"name":"ranktime"}})"));
  EXPECT_EQ(opened[1], json::parse(R"({"name":"process_sort_index","ph":"M","pid":0,"tid":0,
                                       "args":{"sort_index":-1}})"));
  EXPECT_EQ(opened[2], json::parse(R"({"name":"thread_name","ph":"M","pid":0,"tid":0,
                                       "args":{"name":"cycles"}})"));
  EXPECT_EQ(opened[3], json::parse(R"({"name":"ranktime_run","ph":"M","pid":0,"tid":0,"args":{
      "ranks":2,"hostnames":["n1","n1"],"pids":[411,412],
      "start_time_since_epoch_in_micros":1795000000000000,
      "config":{"RANKTIME_CYCLE_TIME_MS":"5","TIMELINE_MARK_CYCLES":"0"},
      "clock_offsets_us":[0,-0.4],"clock_uncertainty_us":[0,1.1],
      "mark_cycles":false,"all_ranks":true}})"));
  EXPECT_EQ(writer->events_written(), 4u);

  writer->close();
  const json closed = read_trace(dir.file("t.json"));
  ASSERT_EQ(closed.size(), 5u);
  EXPECT_EQ(closed.back(), json::parse(R"({"name":"ranktime_run_end","ph":"M","pid":0,"tid":0,
      "args":{"events_written":5,"events_dropped":0,
              "clock_offsets_us":[0,-0.4],"clock_uncertainty_us":[0,1.1]}})"));
  EXPECT_EQ(writer->events_written(), closed.size());
  EXPECT_EQ(writer->path(), dir.file("t.json"));
}

TEST(TraceWriter, RunEndCarriesTheLatestClockOffsets) {
  TempDir dir;
  StringTable strings;
  RunMetadata metadata = two_rank_metadata();
  metadata.mark_cycles = true;
  metadata.all_ranks = false;
  auto writer = open_or_fail(options_for(dir.file("t.json")), strings, metadata);
  writer->set_clock_offsets({0, 2.5}, {0, 0.75});
  writer->close();
  const json trace = read_trace(dir.file("t.json"));
  EXPECT_EQ(trace[3]["args"]["mark_cycles"], true);
  EXPECT_EQ(trace[3]["args"]["all_ranks"], false);
  const json& end = trace.back();
  ASSERT_EQ(end["name"], "ranktime_run_end");
  EXPECT_EQ(end["args"]["clock_offsets_us"], json::parse("[0,2.5]"));
  EXPECT_EQ(end["args"]["clock_uncertainty_us"], json::parse("[0,0.75]"));
}

TEST(TraceWriter, OperationSliceAndSubPhases) {
  TempDir dir;
  StringTable strings;
  strings.intern("layer1.0.conv0.weight");
  const uint32_t tensor = strings.intern("layer1.0.conv1.weight");  // id 2: pid 3
  ASSERT_EQ(tensor, 2u);
  auto writer = open_or_fail(options_for(dir.file("t.json")), strings);
  writer->push(
      op_begin(tensor, 1, at_us(21013.0), Phase::kAllreduce, 6, {64, 64, 1, 1}, 16384, 12));
  writer->push(span(tensor, 1, Phase::kQueue, at_us(21013.0), at_us(21013.4)));
  writer->push(span(tensor, 1, Phase::kMemcpyInFusionBuffer, at_us(21013.4), at_us(21020.1)));
  writer->push(span(tensor, 1, Phase::kMpiAllreduce, at_us(21020.1), at_us(21101.9)));
  writer->push(op_end(tensor, 1, at_us(21108.0)));
  writer->close();

  const std::vector<json> events = events_other_than_metadata(read_trace(dir.file("t.json")));
  const std::vector<json> expected = {
      json::parse(R"({"name":"ALLREDUCE","ph":"B","pid":3,"tid":2,"ts":21013.000,"args":{
          "dtype":"float32","shape":[64,64,1,1],"bytes":16384,"fused_tensors":12}})"),
      json::parse(R"({"name":"QUEUE","ph":"B","pid":3,"tid":2,"ts":21013.000})"),
      json::parse(R"({"name":"QUEUE","ph":"E","pid":3,"tid":2,"ts":21013.400})"),
      json::parse(R"({"name":"MEMCPY_IN_FUSION_BUFFER","ph":"B","pid":3,"tid":2,"ts":21013.400})"),
      json::parse(R"({"name":"MEMCPY_IN_FUSION_BUFFER","ph":"E","pid":3,"tid":2,"ts":21020.100})"),
      json::parse(R"({"name":"MPI_ALLREDUCE","ph":"B","pid":3,"tid":2,"ts":21020.100})"),
      json::parse(R"({"name":"MPI_ALLREDUCE","ph":"E","pid":3,"tid":2,"ts":21101.900})"),
      json::parse(R"({"name":"ALLREDUCE","ph":"E","pid":3,"tid":2,"ts":21108.000})"),
  };
  EXPECT_EQ(events, expected);
}

TEST(TraceWriter, OperationErrorAndTruncatedShape) {
  TempDir dir;
  StringTable strings;
  const uint32_t tensor = strings.intern("grad.w");
  const uint32_t message = strings.intern("rank 1 sent float16, rank 0 float32");
  auto writer = open_or_fail(options_for(dir.file("t.json")), strings);
  writer->push(op_begin(tensor, 0, at_us(5), Phase::kAllgather, 4, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
                        7257600, 1));
  writer->push(op_end(tensor, 0, at_us(9), Phase::kAllgather, message));
  writer->close();

  const std::vector<json> events = events_other_than_metadata(read_trace(dir.file("t.json")));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0], json::parse(R"({"name":"ALLGATHER","ph":"B","pid":2,"tid":1,"ts":5.000,
      "args":{"dtype":"float16","shape":[1,2,3,4,5,6,7,8],"shape_truncated":true,
              "bytes":7257600,"fused_tensors":1}})"));
  EXPECT_EQ(events[1], json::parse(R"({"name":"ALLGATHER","ph":"E","pid":2,"tid":1,"ts":9.000,
      "args":{"error":"rank 1 sent float16, rank 0 float32"}})"));
}

// A fused batch travels as one record per tensor; the writer expands it into exactly the events
// of per-tensor records: operation slice, QUEUE, the batch's sub-phases, and the error if any.
TEST(TraceWriter, FusedBatchExpandsToTheEventsOfPerTensorRecords) {
  TempDir dir;
  StringTable strings;
  const uint32_t a = strings.intern("grad.a");
  const uint32_t b = strings.intern("grad.\"b\"");
  const uint32_t c = strings.intern("grad.c");
  const uint32_t message = strings.intern("tensor 'grad.c': rank 1 sent 3 elements, rank 0 4");
  const SpanList spans = {{Phase::kMemcpyInFusionBuffer, {at_us(12), at_us(15.5)}},
                          {Phase::kMpiAllreduce, {at_us(15.5), at_us(40.25)}},
                          {Phase::kMemcpyOutFusionBuffer, {at_us(40.25), at_us(44)}}};
  struct Tensor {
    uint32_t id;
    uint8_t dtype;
    std::vector<int64_t> dims;
    int64_t bytes;
  };
  const std::vector<Tensor> tensors = {
      {a, 6, {256}, 1024}, {b, 7, {2, 3}, 48}, {c, 0, {1, 2, 3, 4, 5, 6, 7, 8, 9}, 362880}};
  for (const uint32_t error : {0u, message}) {
    for (const int16_t rank : {int16_t{0}, int16_t{3}}) {
      std::vector<Record> compact_tensors;
      std::vector<Record> per_tensor;
      const auto fused = static_cast<uint16_t>(tensors.size());
      for (const Tensor& t : tensors) {
        compact_tensors.push_back(
            op_begin(t.id, rank, 0, Phase::kAllreduce, t.dtype, t.dims, t.bytes, 0));
        per_tensor.push_back(
            op_begin(t.id, rank, at_us(10), Phase::kAllreduce, t.dtype, t.dims, t.bytes, fused));
        per_tensor.push_back(span(t.id, rank, Phase::kQueue, at_us(10), at_us(11.5)));
        for (const auto& [phase, times] : spans)
          per_tensor.push_back(span(t.id, rank, phase, times.first, times.second));
        per_tensor.push_back(op_end(t.id, rank, at_us(44.5), Phase::kAllreduce, error));
      }
      const std::vector<Record> compact = batch(rank, Phase::kAllreduce, at_us(10), at_us(11.5),
                                                at_us(44.5), spans, compact_tensors, error);
      const std::vector<json> expected = events_of(per_tensor, strings, dir, "per_tensor.json");
      ASSERT_EQ(expected.size(), tensors.size() * 10);
      EXPECT_EQ(events_of(compact, strings, dir, "batch.json"), expected)
          << "error " << error << " rank " << rank;
    }
  }
}

// A tensor record is written only with its own batch's header and every sub-phase the header
// announced (records can be dropped when the buffer is full, or corrupt from a peer); batches on
// different lanes do not mix.
TEST(TraceWriter, BatchTensorWithoutItsWholeBatchIsLeftOut) {
  TempDir dir;
  StringTable strings;
  const uint32_t tensor = strings.intern("grad.w");
  const SpanList one_span = {{Phase::kMpiAllreduce, {at_us(2), at_us(3)}}};
  const Record t = op_begin(tensor, 0, 0, Phase::kAllreduce, 6, {4}, 16, 0);
  std::vector<Record> records;
  auto add = [&](const std::vector<Record>& more) {
    records.insert(records.end(), more.begin(), more.end());
  };
  std::vector<Record> lone = batch(1, Phase::kAllreduce, at_us(1), at_us(1), at_us(4), {}, {t});
  add({lone.back()});  // no header on lane 1 yet
  std::vector<Record> short_of_a_span =
      batch(0, Phase::kAllreduce, at_us(1), at_us(1), at_us(4), one_span, {t});
  short_of_a_span.erase(short_of_a_span.begin() + 1);  // its only sub-phase went missing
  add(short_of_a_span);
  std::vector<Record> lane0_open =
      batch(0, Phase::kAllreduce, at_us(5), at_us(5), at_us(8), {}, {t});
  add({lane0_open.front()});
  add({lone.back()});  // lane 0 has a batch open, lane 1 still has none
  add(batch(2, Phase::kBroadcast, at_us(9), at_us(9.5), at_us(11), one_span, {t}));

  const std::vector<json> events = events_of(records, strings, dir, "t.json");
  ASSERT_EQ(events.size(), 6u);  // the last batch only
  EXPECT_EQ(events[0], json::parse(R"({"name":"BROADCAST","ph":"B","pid":2,"tid":3,"ts":9.000,
      "args":{"dtype":"float32","shape":[4],"bytes":16,"fused_tensors":1}})"));
  EXPECT_EQ(events[5], json::parse(R"({"name":"BROADCAST","ph":"E","pid":2,"tid":3,"ts":11.000})"));
}

// A negotiation of up to kMaxInlineTicks ranks travels as one record; the writer gives exactly the
// events of the begin/tick/end records, each tick clamped into the slice the way the recorder
// clamps them (into [previous negotiation's end, the moment all were known]).
TEST(TraceWriter, NegotiationRecordGivesTheEventsOfBeginTicksAndEnd) {
  TempDir dir;
  StringTable strings;
  const uint32_t tensor = strings.intern("grad.n");
  const uint32_t message = strings.intern("tensor 'grad.n': shapes differ: rank 0 [4], rank 2 [5]");
  std::mt19937_64 random(20261122);
  std::vector<Record> compact, expanded;
  for (int trial = 0; trial < 400; ++trial) {
    const int ranks = 1 + static_cast<int>(random() % kMaxInlineTicks);
    std::vector<std::pair<int64_t, int>> ready;
    for (int r = 0; r < ranks; ++r)
      ready.emplace_back(at_us(1000.0 * trial + static_cast<double>(random() % 900'000) / 1000), r);
    std::sort(ready.begin(), ready.end());
    // Sometimes the previous end lies after the first readiness, or beyond the known time.
    const int64_t known = ready.back().first + static_cast<int64_t>(random() % 3000) - 1000;
    const int64_t floor = ready.front().first + static_cast<int64_t>(random() % 4000) - 2000;
    const auto clamp = [&](int64_t t) { return std::min(std::max(t, floor), known); };
    const uint32_t error = trial % 7 == 0 ? message : 0;
    const Phase phase = trial % 2 ? Phase::kNegotiateAllreduce : Phase::kNegotiateBroadcast;

    Record n = negotiate_begin(tensor, clamp(ready.front().first), phase);
    n.kind = RecordKind::kNegotiation;
    n.end_ns = std::max(known, n.ts_ns);
    n.args.negotiation.error_string = error;
    n.args.negotiation.ticks = static_cast<uint16_t>(ranks);
    for (int i = 0; i < ranks; ++i) {
      n.args.negotiation.ready_ns[i] = ready[i].first;
      n.args.negotiation.rank[i] = ready[i].second;
    }
    compact.push_back(n);

    expanded.push_back(negotiate_begin(tensor, n.ts_ns, phase));
    const int64_t first = ready.front().first;
    for (const auto& [t, rank] : ready) expanded.push_back(tick(tensor, rank, clamp(t), t - first));
    expanded.push_back(negotiate_end(tensor, n.end_ns, ready.back().second,
                                     ready.back().first - first, error, phase));
  }
  const std::vector<json> expected = events_of(expanded, strings, dir, "expanded.json");
  EXPECT_EQ(events_of(compact, strings, dir, "compact.json"), expected);

  Record empty = compact.front();
  empty.args.negotiation.ticks = 0;  // corrupt: no tick, no slice
  EXPECT_TRUE(events_of({empty}, strings, dir, "empty.json").empty());
}

// Every number at its extreme in every kind of event: the text of each event still fits the
// room the formatter makes for it (it aborts otherwise) and reads back as the same values.
TEST(TraceWriter, ExtremeValuesInEveryFieldFitAndReadBack) {
  TempDir dir;
  StringTable strings;
  const uint32_t tensor = strings.intern("t");
  const uint32_t name = strings.intern("n");
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  // Timestamps are taken relative to the run start, so they stay clear of overflow.
  constexpr int64_t kEarly = kMin / 2, kLate = kMax / 2;
  constexpr int32_t kMin32 = std::numeric_limits<int32_t>::min();
  auto writer = open_or_fail(options_for(dir.file("t.json")), strings);
  writer->push(op_begin(tensor, std::numeric_limits<int16_t>::min(), kEarly, Phase::kAllreduce, 255,
                        std::vector<int64_t>(12, kMin), kMax, 65535));
  writer->push(op_end(tensor, std::numeric_limits<int16_t>::max(), kLate, Phase::kAllreduce, name));
  writer->push(span(tensor, -1, Phase::kMemcpyInFusionBuffer, kEarly, kLate));
  writer->push(negotiate_begin(tensor, kEarly));
  writer->push(tick(tensor, kMin32, kEarly, kMin));
  writer->push(tick(tensor, kMin32, kLate, kMax));
  writer->push(negotiate_end(tensor, kLate, kMin32, kMin, name));
  writer->push(cycle(kEarly, kMin));
  writer->push(counter(kEarly, name, kMin32, -1.7976931348623157e308));
  writer->push(instant(kLate, name, name));
  const SpanList spans(40, {Phase::kMemcpyOutFusionBuffer, {kEarly, kLate}});
  for (const Record& r :
       batch(std::numeric_limits<int16_t>::min(), Phase::kBarrier, kEarly, kLate, kLate, spans,
             {op_begin(tensor, 0, 0, Phase::kAllreduce, 255, std::vector<int64_t>(12, kMin), kMax,
                       0)},
             name)) {
    writer->push(r);
  }
  Record n = negotiate_begin(tensor, kEarly);
  n.kind = RecordKind::kNegotiation;
  n.end_ns = kLate;
  n.args.negotiation.error_string = name;
  n.args.negotiation.ticks = std::numeric_limits<uint16_t>::max();  // as many as fit
  for (int i = 0; i < kMaxInlineTicks; ++i) {
    n.args.negotiation.rank[i] = kMin32;
    n.args.negotiation.ready_ns[i] = i % 2 ? kMin : kMax;
  }
  writer->push(n);
  writer->close();

  const std::vector<json> events = events_other_than_metadata(read_trace(dir.file("t.json")));
  const size_t batch_events = 4 + 2 * spans.size();
  ASSERT_EQ(events.size(), 11u + batch_events + 2 + kMaxInlineTicks);
  const json& last_tick = events[events.size() - 2];
  EXPECT_EQ(last_tick["args"]["rank"], kMin32);
  EXPECT_EQ(last_tick["ts"].get<double>(), events[11 + batch_events]["ts"].get<double>());
  EXPECT_EQ(events.back()["args"]["last_rank"], kMin32);
  EXPECT_EQ(events.back()["args"]["error"], "n");
  EXPECT_EQ(events[11]["args"]["shape"], json(std::vector<int64_t>(kMaxInlineDims, kMin)));
  EXPECT_EQ(events[11]["tid"], std::numeric_limits<int16_t>::min() + 1);
  EXPECT_EQ(events[10 + batch_events]["args"]["error"], "n");
  EXPECT_EQ(events[0]["args"]["bytes"], kMax);
  EXPECT_EQ(events[0]["args"]["shape"], json(std::vector<int64_t>(kMaxInlineDims, kMin)));
  EXPECT_EQ(events[0]["args"]["dtype"], "unknown");
  EXPECT_EQ(events[0]["tid"], std::numeric_limits<int16_t>::min() + 1);
  EXPECT_EQ(events[1]["args"]["error"], "n");
  EXPECT_EQ(events[1]["tid"], std::numeric_limits<int16_t>::max() + 1);
  EXPECT_EQ(events[2]["tid"], 0);  // rank -1's lane
  EXPECT_EQ(events[5]["args"]["rank"], kMin32);
  EXPECT_DOUBLE_EQ(events[5]["args"]["lag_us"].get<double>(), -9223372036854775.808);
  EXPECT_DOUBLE_EQ(events[6]["args"]["lag_us"].get<double>(), 9223372036854775.807);
  EXPECT_EQ(events[7]["args"]["last_rank"], kMin32);
  EXPECT_DOUBLE_EQ(events[7]["args"]["spread_us"].get<double>(), -9223372036854775.808);
  EXPECT_EQ(events[8]["args"]["cycle"], kMin);
  EXPECT_DOUBLE_EQ(events[9]["args"]["rank -2147483648"].get<double>(), -1.7976931348623157e308);
  EXPECT_EQ(events[10]["args"]["message"], "n");
}

TEST(TraceWriter, EveryDataTypeHasItsName) {
  TempDir dir;
  StringTable strings;
  const uint32_t tensor = strings.intern("t");
  auto writer = open_or_fail(options_for(dir.file("t.json")), strings);
  for (uint8_t dtype = 0; dtype < 8; ++dtype) {
    writer->push(op_begin(tensor, 0, at_us(10 * dtype), Phase::kBroadcast, dtype, {3}, 3, 1));
    writer->push(op_end(tensor, 0, at_us(10 * dtype + 5), Phase::kBroadcast));
  }
  writer->close();

  std::vector<std::string> names;
  for (const json& e : events_other_than_metadata(read_trace(dir.file("t.json")))) {
    if (e["ph"] == "B") names.push_back(e["args"]["dtype"]);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"uint8", "int8", "int32", "int64", "float16",
                                             "bfloat16", "float32", "float64"}));
}

TEST(TraceWriter, NegotiationSliceAndTicks) {
  TempDir dir;
  StringTable strings;
  strings.intern("a");
  const uint32_t tensor = strings.intern("layer1.0.conv1.weight");
  const uint32_t mismatch = strings.intern("shape mismatch: rank 0 [4], rank 1 [5]");
  auto writer = open_or_fail(options_for(dir.file("t.json")), strings);
  writer->push(negotiate_begin(tensor, at_us(1000)));
  writer->push(tick(tensor, 0, at_us(1000), 0));
  writer->push(tick(tensor, 1, at_us(21000.25), 20000250));
  writer->push(negotiate_end(tensor, at_us(21012.5), 1, 20000250));
  writer->push(negotiate_begin(tensor, at_us(30000), Phase::kNegotiateBarrier));
  writer->push(negotiate_end(tensor, at_us(30001), 0, 500, mismatch, Phase::kNegotiateBarrier));
  writer->close();

  const std::vector<json> events = events_other_than_metadata(read_trace(dir.file("t.json")));
  const std::vector<json> expected = {
      json::parse(R"({"name":"NEGOTIATE_ALLREDUCE","ph":"B","pid":3,"tid":0,"ts":1000.000})"),
      json::parse(R"({"name":"0","ph":"X","pid":3,"tid":0,"ts":1000.000,"dur":0,
                      "args":{"rank":0,"lag_us":0.000}})"),
      json::parse(R"({"name":"1","ph":"X","pid":3,"tid":0,"ts":21000.250,"dur":0,
                      "args":{"rank":1,"lag_us":20000.250}})"),
      json::parse(R"({"name":"NEGOTIATE_ALLREDUCE","ph":"E","pid":3,"tid":0,"ts":21012.500,
                      "args":{"last_rank":1,"spread_us":20000.250}})"),
      json::parse(R"({"name":"NEGOTIATE_BARRIER","ph":"B","pid":3,"tid":0,"ts":30000.000})"),
      json::parse(R"({"name":"NEGOTIATE_BARRIER","ph":"E","pid":3,"tid":0,"ts":30001.000,
          "args":{"last_rank":0,"spread_us":0.500,
                  "error":"shape mismatch: rank 0 [4], rank 1 [5]"}})"),
  };
  EXPECT_EQ(events, expected);
}

TEST(TraceWriter, RunLevelEventsOnPidZero) {
  TempDir dir;
  StringTable strings;
  const uint32_t stall = strings.intern("STALL");
  const uint32_t message = strings.intern("ranks 2 have not submitted: grad.w");
  const uint32_t lateness = strings.intern("lateness_median_lag_us");
  auto writer = open_or_fail(options_for(dir.file("t.json")), strings);
  writer->push(cycle(at_us(5021.25), 17));
  writer->push(instant(at_us(61000), stall, message));
  writer->push(counter(at_us(62000), lateness, 2, 20011.5));
  writer->close();

  const json trace = read_trace(dir.file("t.json"));
  const std::vector<json> expected = {
      json::parse(R"({"name":"CYCLE_START","ph":"i","s":"p","pid":0,"tid":0,"ts":5021.250,
                      "args":{"cycle":17}})"),
      json::parse(R"({"name":"STALL","ph":"i","s":"g","pid":0,"tid":0,"ts":61000.000,
                      "args":{"message":"ranks 2 have not submitted: grad.w"}})"),
      json::parse(R"({"name":"lateness_median_lag_us","ph":"C","pid":0,"tid":0,"ts":62000.000,
                      "args":{"rank 2":20011.5}})"),
  };
  EXPECT_EQ(events_other_than_metadata(trace), expected);
  // pid 0 events name no tensor: no tensor process appears.
  for (const json& e : trace) EXPECT_EQ(e["pid"], 0);
}

TEST(TraceWriter, TimestampsAreMicrosecondsWithThreeDecimals) {
  TempDir dir;
  StringTable strings;
  const uint32_t tensor = strings.intern("t");
  auto writer = open_or_fail(options_for(dir.file("t.json")), strings);
  const std::vector<int64_t> offsets_ns = {
      0,         1,          999,           1000, 1234567, -1500, -1,        86400000000001,
      100000000, 1000000001, 4000000000000, 10,   100,     99999, 123456789, -10020};
  for (int64_t offset : offsets_ns) writer->push(cycle(kStartNs + offset, 1));
  writer->push(negotiate_begin(tensor, kStartNs));
  writer->push(tick(tensor, 0, kStartNs, 333));
  writer->push(negotiate_end(tensor, kStartNs + 1, 0, 2001));
  writer->close();

  std::vector<std::string> ts;
  std::vector<std::string> decimal3;
  for (const auto& [key, lexeme] : number_lexemes(dir.file("t.json")).numbers) {
    if (key == "ts") ts.push_back(lexeme);
    if (key == "ts" || key == "lag_us" || key == "spread_us") decimal3.push_back(lexeme);
  }
  const std::vector<std::string> expected = {
      "0.000",          "0.001",  "0.999",           "1.000",      "1234.567",
      "-1.500",         "-0.001", "86400000000.001", "100000.000", "1000000.001",
      "4000000000.000", "0.010",  "0.100",           "99.999",     "123456.789",
      "-10.020",        "0.000",  "0.000",           "0.001"};
  EXPECT_EQ(ts, expected);
  const std::regex three_decimals(R"(-?[0-9]+\.[0-9]{3})");
  for (const std::string& lexeme : decimal3) {
    EXPECT_TRUE(std::regex_match(lexeme, three_decimals)) << lexeme;
  }
}

TEST(TraceWriter, TensorAndLaneMetadataWrittenOncePerFile) {
  TempDir dir;
  StringTable strings;
  const uint32_t a = strings.intern("a.weight");
  const uint32_t b = strings.intern("b.weight");
  auto writer = open_or_fail(options_for(dir.file("t.json")), strings);
  for (int step = 0; step < 3; ++step) {
    const int64_t t0 = at_us(1000 * step);
    for (uint32_t tensor : {a, b}) {
      writer->push(negotiate_begin(tensor, t0));
      writer->push(negotiate_end(tensor, t0 + 10, 0, 0));
      for (int16_t rank : {0, 1, 3}) {
        writer->push(op_begin(tensor, rank, t0 + 20));
        writer->push(op_end(tensor, rank, t0 + 30));
      }
    }
    writer->flush();  // metadata state must survive across flushes
  }
  writer->close();
  const json trace = read_trace(dir.file("t.json"));

  for (uint32_t tensor : {a, b}) {
    const int64_t pid = tensor + 1;
    std::vector<json> process_names, sort_indices, thread_names;
    for (const json& e : trace) {
      if (e["pid"] != pid || e["ph"] != "M") continue;
      if (e["name"] == "process_name") process_names.push_back(e);
      if (e["name"] == "process_sort_index") sort_indices.push_back(e);
      if (e["name"] == "thread_name") thread_names.push_back(e);
    }
    ASSERT_EQ(process_names.size(), 1u);
    EXPECT_EQ(process_names[0]["args"]["name"], strings.lookup(tensor));
    ASSERT_EQ(sort_indices.size(), 1u);
    EXPECT_EQ(sort_indices[0]["args"]["sort_index"], tensor);
    std::map<int64_t, std::vector<std::string>> names_by_tid;
    for (const json& e : thread_names) names_by_tid[e["tid"]].push_back(e["args"]["name"]);
    EXPECT_EQ(names_by_tid,
              (std::map<int64_t, std::vector<std::string>>{
                  {0, {"negotiate"}}, {1, {"rank 0"}}, {2, {"rank 1"}}, {4, {"rank 3"}}}));
  }
  std::map<std::pair<int64_t, int64_t>, int> thread_sort_indices;
  for (const json& e : metadata_named(trace, "thread_sort_index")) {
    ++thread_sort_indices[{e["pid"], e["tid"]}];
    EXPECT_EQ(e["args"]["sort_index"], e["tid"]);
  }
  EXPECT_EQ(thread_sort_indices.size(), 6u);
  for (const auto& [lane, count] : thread_sort_indices) EXPECT_EQ(count, 1);

  // A thread's name precedes its first event, so a one-pass reader knows it.
  std::set<std::pair<int64_t, int64_t>> named;
  for (const json& e : trace) {
    const std::pair<int64_t, int64_t> thread{e["pid"], e["tid"]};
    if (e["ph"] == "M" && e["name"] == "thread_name") named.insert(thread);
    if (e["ph"] != "M") {
      EXPECT_TRUE(named.count(thread) != 0) << e.dump();
    }
  }

  // Another file starts over: the names are written again there.
  auto second = open_or_fail(options_for(dir.file("second.json")), strings);
  second->push(op_begin(a, 0, at_us(1)));
  second->close();
  const json second_trace = read_trace(dir.file("second.json"));
  EXPECT_EQ(metadata_named(second_trace, "process_name").size(), 2u);  // ranktime + a.weight
  EXPECT_EQ(metadata_named(second_trace, "thread_name").size(), 3u);   // cycles, negotiate, rank 0
}

// A realistic run: several tensors, four ranks, negotiations then nested operation slices, the
// ranks' batches interleaved. Within each (pid, tid) events must nest and be in time order.
TEST(TraceWriter, SlicesNestAndStayInOrderPerThread) {
  TempDir dir;
  StringTable strings;
  std::vector<uint32_t> tensors;
  for (int i = 0; i < 5; ++i) tensors.push_back(strings.intern("tensor." + std::to_string(i)));
  auto writer = open_or_fail(options_for(dir.file("t.json")), strings);
  constexpr int kRanks = 4;
  size_t records = 0;
  for (int step = 0; step < 40; ++step) {
    const int64_t t0 = at_us(10000.0 * step);
    for (uint32_t tensor : tensors) {
      std::vector<Record> batch;
      batch.push_back(negotiate_begin(tensor, t0));
      for (int r = 0; r < kRanks; ++r) batch.push_back(tick(tensor, r, t0 + 100 * r, 100 * r));
      batch.push_back(negotiate_end(tensor, t0 + 500, kRanks - 1, 300));
      writer->push(batch.data(), batch.size());
      records += batch.size();
    }
    for (int r = kRanks - 1; r >= 0; --r) {  // ranks' batches arrive in any order
      for (uint32_t tensor : tensors) {
        const int64_t b = t0 + 1000 + 1000 * tensor;
        const auto rank = static_cast<int16_t>(r);
        const Record batch[] = {
            op_begin(tensor, rank, b),
            span(tensor, rank, Phase::kQueue, b, b + 100),
            span(tensor, rank, Phase::kMemcpyInFusionBuffer, b + 100, b + 200),
            span(tensor, rank, Phase::kMpiAllreduce, b + 200, b + 200),  // zero length
            span(tensor, rank, Phase::kMemcpyOutFusionBuffer, b + 200, b + 300),
            op_end(tensor, rank, b + 300),
        };
        EXPECT_EQ(writer->push(batch, 6), 0u);
        records += 6;
      }
    }
    if (step % 7 == 0) writer->flush();
  }
  writer->close();
  const json trace = read_trace(dir.file("t.json"));
  EXPECT_EQ(writer->dropped(), 0u);

  std::map<std::pair<int64_t, int64_t>, std::vector<std::string>> stacks;
  std::map<std::pair<int64_t, int64_t>, double> last_ts;
  size_t slices = 0, ticks = 0;
  for (const json& e : trace) {
    if (e["ph"] == "M") continue;
    const std::pair<int64_t, int64_t> thread{e["pid"], e["tid"]};
    const double ts = e["ts"];
    if (last_ts.count(thread) != 0) {
      EXPECT_LE(last_ts[thread], ts) << e.dump();
    }
    last_ts[thread] = ts;
    std::vector<std::string>& stack = stacks[thread];
    if (e["ph"] == "B") {
      stack.push_back(e["name"]);
    } else if (e["ph"] == "E") {
      ASSERT_FALSE(stack.empty()) << e.dump();
      EXPECT_EQ(stack.back(), e["name"]) << e.dump();
      stack.pop_back();
      ++slices;
    } else if (e["ph"] == "X") {
      EXPECT_EQ(stack, std::vector<std::string>{"NEGOTIATE_ALLREDUCE"}) << "tick outside its slice";
      ++ticks;
    }
  }
  for (const auto& [thread, stack] : stacks) EXPECT_TRUE(stack.empty());
  EXPECT_EQ(ticks, 40u * 5 * kRanks);
  EXPECT_EQ(slices, 40u * 5 * (1 + kRanks * 5));
  EXPECT_EQ(stacks.size(), 5u * (1 + kRanks));
  EXPECT_EQ(writer->events_written(), trace.size());
  EXPECT_EQ(trace.back()["args"]["events_written"], trace.size());
  (void)records;
}

TEST(TraceWriter, EscapesNamesAndMessages) {
  TempDir dir;
  StringTable strings;
  std::string controls;
  for (char c = 1; c < 0x20; ++c) controls.push_back(c);
  controls += "\x7f end";
  const std::vector<std::string> names = {
      "quote\"d", "back\\slash", "new\nline", "tab\there", "ctrl\x01",
      "梯度/∇w",  controls,      "emoji 🚀",   "",          "</script>",
  };
  std::vector<uint32_t> ids;
  for (const std::string& name : names) ids.push_back(strings.intern(name));

  RunMetadata metadata = two_rank_metadata();
  metadata.hostnames = {"host\"1\"", "梯度"};
  metadata.config = {{"WEIRD\\KEY", "va\"l\nue"}};
  auto writer = open_or_fail(options_for(dir.file("t.json")), strings, metadata);
  for (size_t i = 0; i < ids.size(); ++i) {
    writer->push(op_begin(ids[i], 0, at_us(i)));
    writer->push(op_end(ids[i], 0, at_us(i + 0.5), Phase::kAllreduce, ids[i]));
    writer->push(instant(at_us(i), ids[i], ids[i]));
    writer->push(counter(at_us(i), ids[i], 0, 1.0));
  }
  writer->close();
  const json trace = read_trace(dir.file("t.json"));

  EXPECT_EQ(trace[3]["args"]["hostnames"], json(metadata.hostnames));
  EXPECT_EQ(trace[3]["args"]["config"], json::parse(R"({"WEIRD\\KEY":"va\"l\nue"})"));
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t pid = ids[i] + 1;
    std::vector<std::string> process_names, errors, instants, messages, counters;
    for (const json& e : trace) {
      if (e["ph"] == "M" && e["name"] == "process_name" && e["pid"] == pid) {
        process_names.push_back(e["args"]["name"]);
      }
      if (e["ph"] == "E" && e["pid"] == pid && e.contains("args")) {
        errors.push_back(e["args"]["error"]);
      }
      if (e["ph"] == "i" && e["ts"] == static_cast<double>(i)) {
        instants.push_back(e["name"]);
        messages.push_back(e["args"]["message"]);
      }
      if (e["ph"] == "C" && e["ts"] == static_cast<double>(i)) counters.push_back(e["name"]);
    }
    const std::vector<std::string> expected = {names[i]};
    EXPECT_EQ(process_names, expected) << i;
    EXPECT_EQ(instants, expected) << i;
    EXPECT_EQ(messages, expected) << i;
    EXPECT_EQ(counters, expected) << i;
    // Error id 0 means "no error": the empty name's op end carries no error arg.
    EXPECT_EQ(errors, ids[i] != 0 ? expected : std::vector<std::string>{}) << i;
  }
}

TEST(TraceWriter, InvalidUtf8BecomesReplacementCharacters) {
  TempDir dir;
  StringTable strings;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bad\xff", "bad\xEF\xBF\xBD"},                            // never valid byte
      {"cut\xc3", "cut\xEF\xBF\xBD"},                            // truncated 2-byte sequence
      {"cut\xe6\xa2!", "cut\xEF\xBF\xBD!"},                      // truncated 3-byte sequence
      {"\xc0\xaf", "\xEF\xBF\xBD\xEF\xBF\xBD"},                  // overlong '/'
      {"\xed\xa0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},  // UTF-16 surrogate
      {"\xf4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},  // > U+10FFFF
      {"ok \xe2\x88\x87 \x80 ok", "ok \xe2\x88\x87 \xEF\xBF\xBD ok"},  // stray continuation
  };
  std::vector<uint32_t> ids;
  for (const auto& [raw, expected] : cases) ids.push_back(strings.intern(raw));
  auto writer = open_or_fail(options_for(dir.file("t.json")), strings);
  for (uint32_t id : ids) writer->push(negotiate_begin(id, at_us(1)));
  writer->close();

  const json trace = read_trace(dir.file("t.json"));  // throws if the UTF-8 is not valid
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<std::string> process_names;
    for (const json& e : metadata_named(trace, "process_name")) {
      if (e["pid"] == ids[i] + 1) process_names.push_back(e["args"]["name"]);
    }
    EXPECT_EQ(process_names, std::vector<std::string>{cases[i].second}) << i;
  }
}

TEST(TraceWriter, FileIsCompleteAfterEveryFlushWhileOpen) {
  TempDir dir;
  StringTable strings;
  const uint32_t tensor = strings.intern("w");
  auto writer = open_or_fail(options_for(dir.file("t.json")), strings);
  size_t previous_size = 0;
  for (int round = 1; round <= 5; ++round) {
    for (int i = 0; i < 100 * round; ++i) {
      writer->push(span(tensor, 0, Phase::kQueue, at_us(i), at_us(i + 1)));
    }
    writer->flush();
    const json trace = read_trace(dir.file("t.json"));  // mid-run, from disk
    ASSERT_TRUE(trace.is_array());
    EXPECT_GT(trace.size(), previous_size);
    EXPECT_EQ(trace.size(), writer->events_written());
    EXPECT_NE(trace.back()["name"], "ranktime_run_end");  // still open
    previous_size = trace.size();
  }
  writer->close();
  const json trace = read_trace(dir.file("t.json"));
  EXPECT_EQ(events_other_than_metadata(trace).size(), 2u * 100 * (1 + 2 + 3 + 4 + 5));
}

// Polls the file (no flush() call) until it holds `events` events, for up to 20 s.
bool file_reaches(const std::string& path, size_t events) {
  for (int attempt = 0; attempt < 2000; ++attempt) {
    try {
      if (read_trace(path).size() >= events) return true;
    } catch (const std::exception&) {
      // Read in the middle of the pwrite: try again.
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(TraceWriter, WritesWithinTheFlushIntervalWithoutFlush) {
  TempDir dir;
  StringTable strings;
  TraceWriterOptions options = options_for(dir.file("t.json"));
  options.flush_interval = std::chrono::milliseconds(20);
  auto writer = open_or_fail(options, strings);
  writer->push(cycle(at_us(1), 1));
  EXPECT_TRUE(file_reaches(dir.file("t.json"), 5));  // the timer gets the record out on its own
  writer->close();
}

// The threads of this process with scheduling policy `policy`.
size_t threads_with_policy(int policy) {
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    const pid_t tid = static_cast<pid_t>(std::stol(entry.path().filename().string()));
    if (sched_getscheduler(tid) == policy) ++n;
  }
  return n;
}

TEST(TraceWriter, IdleDetectorRunsAtIdlePriorityOnlyWhileOpen) {
  TempDir dir;
  StringTable strings;
  const size_t before = threads_with_policy(SCHED_IDLE);
  auto writer = open_or_fail(options_for(dir.file("t.json")), strings);
  // The detector sets its own policy when it starts: wait for it.
  for (int attempt = 0; attempt < 2000 && threads_with_policy(SCHED_IDLE) == before; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(threads_with_policy(SCHED_IDLE), before + 1);
  // close() does not wait for it (on a busy machine it may not run for a long time); it quits
  // the next time it runs.
  writer->close();
  for (int attempt = 0; attempt < 60000 && threads_with_policy(SCHED_IDLE) != before; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(threads_with_policy(SCHED_IDLE), before);
}

// The writer thread is SCHED_BATCH (no wake-up preemption) when it uses idle cores, and a plain
// SCHED_OTHER thread otherwise; it is joined on close.
TEST(TraceWriter, WriterRunsAsBatchOnlyWhenUsingIdleCores) {
  TempDir dir;
  StringTable strings;
  const size_t before = threads_with_policy(SCHED_BATCH);
  for (const bool idle_cores : {true, false}) {
    SCOPED_TRACE(idle_cores ? "idle cores" : "no idle detector");
    TraceWriterOptions options = options_for(dir.file(idle_cores ? "idle.json" : "plain.json"));
    options.use_idle_cores = idle_cores;
    auto writer = open_or_fail(options, strings);
    // The writer sets its own policy when it starts: wait for it.
    const size_t expected = before + (idle_cores ? 1 : 0);
    for (int attempt = 0; attempt < 2000 && threads_with_policy(SCHED_BATCH) != expected;
         ++attempt) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(threads_with_policy(SCHED_BATCH), expected);
    writer->close();
    EXPECT_EQ(threads_with_policy(SCHED_BATCH), before);
  }
}

// With the flush interval at an hour and no flush(), records still reach the file: an eighth of
// the buffer on idle cores (this test leaves cores idle), half of it in any case.
TEST(TraceWriter, WritesOnIdleCoresAndWhenHalfFullWithoutFlush) {
  TempDir dir;
  StringTable strings;
  const uint32_t tensor = strings.intern("w");
  for (const bool idle_cores : {true, false}) {
    SCOPED_TRACE(idle_cores ? "idle cores" : "no idle detector");
    const std::string path = dir.file(idle_cores ? "idle.json" : "half.json");
    TraceWriterOptions options = options_for(path);  // flush interval: 1 h
    options.capacity_records = 1600;
    options.use_idle_cores = idle_cores;
    auto writer = open_or_fail(options, strings);
    const size_t header = read_trace(path).size();
    const int spans = idle_cores ? 200 : 800;  // an eighth, a half
    for (int i = 0; i < spans; ++i) {
      writer->push(span(tensor, 0, Phase::kQueue, at_us(i), at_us(i)));
    }
    EXPECT_TRUE(file_reaches(path, header + 2 * spans));
    writer->close();
    EXPECT_EQ(writer->dropped(), 0u);
  }
}

TEST(TraceWriter, DropsWhenTheBufferIsFullAndReportsThem) {
  TempDir dir;
  StringTable strings;
  const uint32_t tensor = strings.intern("w");
  TraceWriterOptions options = options_for(dir.file("t.json"));
  options.capacity_records = 4;
  auto writer = open_or_fail(options, strings);
  std::vector<Record> batch;
  for (int i = 0; i < 100; ++i) batch.push_back(span(tensor, 0, Phase::kQueue, at_us(i), at_us(i)));
  EXPECT_EQ(writer->push(batch.data(), batch.size()), 96u);  // one lock: 4 fit, 96 do not
  EXPECT_EQ(writer->dropped(), 96u);
  writer->close();
  EXPECT_FALSE(writer->push(batch[0]));  // closed: dropped too
  EXPECT_EQ(writer->dropped(), 97u);

  const json trace = read_trace(dir.file("t.json"));
  EXPECT_EQ(events_other_than_metadata(trace).size(), 8u);  // 4 spans, B and E each
  ASSERT_EQ(trace.back()["name"], "ranktime_run_end");
  EXPECT_EQ(trace.back()["args"]["events_dropped"], 96);
  EXPECT_EQ(trace.back()["args"]["events_written"], trace.size());
}

TEST(TraceWriter, DiskFullCallsOnErrorOnceAndKeepsCounting) {
  if (access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no writable /dev/full";
  StringTable strings;
  const uint32_t tensor = strings.intern("w");
  std::mutex mutex;
  std::vector<std::string> errors;
  TraceWriterOptions options = options_for("/dev/full");
  options.on_error = [&](const std::string& message) {
    std::lock_guard<std::mutex> lock(mutex);
    errors.push_back(message);
  };
  auto writer = open_or_fail(options, strings);  // opening succeeds; writing does not
  size_t pushed = 0;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 10; ++i, ++pushed) {
      writer->push(span(tensor, 0, Phase::kQueue, at_us(i), at_us(i + 1)));
    }
    writer->flush();
  }
  writer->close();
  writer->close();
  std::lock_guard<std::mutex> lock(mutex);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("/dev/full"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find(std::strerror(ENOSPC)), std::string::npos) << errors[0];
  EXPECT_EQ(writer->events_written(), 0u);
  EXPECT_EQ(writer->dropped(), pushed);
}

TEST(TraceWriter, MissingDirectoryFailsWithAMessage) {
  TempDir dir;
  StringTable strings;
  const std::string path = dir.file("no/such/dir/t.json");
  std::string error;
  auto writer = TraceWriter::open(options_for(path), two_rank_metadata(), strings, &error);
  EXPECT_TRUE(writer == nullptr);
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find(std::strerror(ENOENT)), std::string::npos) << error;
}

TEST(TraceWriter, CloseIsIdempotentAndTheDestructorCloses) {
  TempDir dir;
  StringTable strings;
  {
    auto writer = open_or_fail(options_for(dir.file("a.json")), strings);
    writer->push(cycle(at_us(1), 1));
    writer->close();
    writer->close();
    writer->flush();  // after close: returns at once
  }
  {
    auto writer = open_or_fail(options_for(dir.file("b.json")), strings);
    writer->push(cycle(at_us(1), 1));
  }  // destroyed without close()
  for (const char* name : {"a.json", "b.json"}) {
    const json trace = read_trace(dir.file(name));
    ASSERT_EQ(trace.size(), 6u) << name;
    EXPECT_EQ(trace[4]["name"], "CYCLE_START");
    EXPECT_EQ(trace[5]["name"], "ranktime_run_end");
    EXPECT_EQ(trace[5]["args"]["events_written"], 6);
  }
}

TEST(TraceWriter, ConcurrentProducersLoseNothingWithEnoughCapacity) {
  TempDir dir;
  StringTable strings;
  constexpr int kThreads = 4;
  constexpr int kSpansPerThread = 20000;
  TraceWriterOptions options = options_for(dir.file("t.json"));
  options.capacity_records = kThreads * kSpansPerThread;
  options.flush_interval = std::chrono::milliseconds(5);
  auto writer = open_or_fail(options, strings);
  std::vector<std::thread> producers;
  for (int t = 0; t < kThreads; ++t) {
    const uint32_t tensor = strings.intern("tensor." + std::to_string(t));
    producers.emplace_back([&writer, tensor] {
      for (int i = 0; i < kSpansPerThread; ++i) {
        writer->push(span(tensor, 0, Phase::kQueue, at_us(i), at_us(i + 0.5)));
        if (i % 5000 == 0) writer->flush();
      }
    });
  }
  for (std::thread& producer : producers) producer.join();
  writer->close();
  const json trace = read_trace(dir.file("t.json"));
  EXPECT_EQ(writer->dropped(), 0u);
  std::map<int64_t, std::vector<double>> begins;
  for (const json& e : trace) {
    if (e["ph"] == "B") begins[e["pid"]].push_back(e["ts"]);
  }
  ASSERT_EQ(begins.size(), static_cast<size_t>(kThreads));
  for (const auto& [pid, ts] : begins) {
    ASSERT_EQ(ts.size(), static_cast<size_t>(kSpansPerThread));
    for (int i = 0; i < kSpansPerThread; ++i) ASSERT_EQ(ts[i], static_cast<double>(i));
  }
}

// --- Signals ---------------------------------------------------------------------------------
// Each test forks: the child opens writers, installs the flush and gets a signal; the parent
// checks how the child ended and reads the files. Children report failures by exit code, and an
// alarm kills a child that hangs so the test fails instead of blocking.

constexpr int kSignalRecords = 1500;

volatile sig_atomic_t g_previous_handler_ran = 0;

// Child side: two open writers with records pushed but not flushed (a long flush interval and a
// buffer that never gets half full), so only the signal path can write them.
[[noreturn]] void child_pushes_then_signals(int sig, const std::string& a, const std::string& b,
                                            bool wait_for_files) {
  alarm(60);
  StringTable strings;
  const uint32_t tensor = strings.intern("grad.w");
  TraceWriterOptions options = options_for(a);
  options.capacity_records = 4 * kSignalRecords;
  std::string error;
  auto first = TraceWriter::open(options, two_rank_metadata(), strings, &error);
  options.path = b;
  auto second = TraceWriter::open(options, two_rank_metadata(), strings, &error);
  if (!first || !second) _exit(3);
  install_signal_flush();
  install_signal_flush();  // installed once
  for (int i = 0; i < kSignalRecords; ++i) {
    first->push(span(tensor, 0, Phase::kQueue, at_us(i), at_us(i + 1)));
    second->push(cycle(at_us(i), i + 1));
  }
  raise(sig);
  if (wait_for_files) {
    // A chained handler let the process live: wait for the watcher to finish both files.
    for (;;) {
      try {
        if (read_trace(a).back()["name"] == "ranktime_run_end" &&
            read_trace(b).back()["name"] == "ranktime_run_end") {
          _exit(g_previous_handler_ran ? 0 : 7);
        }
      } catch (const std::exception&) {
        // Read while the closing pwrite was under way; the parent checks the final file.
      }
      usleep(1000);
    }
  }
  for (;;) pause();
}

void expect_complete_after_signal(const std::string& a, const std::string& b) {
  const json first = read_trace(a);
  size_t spans = 0;
  for (const json& e : first) spans += e["ph"] == "B";
  EXPECT_EQ(spans, static_cast<size_t>(kSignalRecords));
  ASSERT_EQ(first.back()["name"], "ranktime_run_end");
  EXPECT_EQ(first.back()["args"]["events_written"], first.size());
  EXPECT_EQ(first.back()["args"]["events_dropped"], 0);

  const json second = read_trace(b);
  std::vector<int64_t> cycles;
  for (const json& e : second) {
    if (e["name"] == "CYCLE_START") cycles.push_back(e["args"]["cycle"]);
  }
  ASSERT_EQ(cycles.size(), static_cast<size_t>(kSignalRecords));
  for (int i = 0; i < kSignalRecords; ++i) EXPECT_EQ(cycles[i], i + 1);
  EXPECT_EQ(second.back()["name"], "ranktime_run_end");
}

void expect_signal_flushes_and_kills(int sig) {
  TempDir dir;
  const std::string a = dir.file("a.json"), b = dir.file("b.json");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) child_pushes_then_signals(sig, a, b, false);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), sig) << strsignal(WTERMSIG(status));
  expect_complete_after_signal(a, b);
}

TEST(TraceWriterSignals, SigtermFlushesEveryOpenWriterThenKills) {
  expect_signal_flushes_and_kills(SIGTERM);
}

TEST(TraceWriterSignals, SigintFlushesEveryOpenWriterThenKills) {
  expect_signal_flushes_and_kills(SIGINT);
}

// The runtime's thread keeps pushing while the signal is handled: the file must still end
// complete, with every record accepted before the close, in order.
TEST(TraceWriterSignals, SigtermWhileAProducerIsPushing) {
  TempDir dir;
  const std::string path = dir.file("t.json");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(60);
    StringTable strings;
    TraceWriterOptions options = options_for(path);
    options.capacity_records = 1 << 16;
    options.flush_interval = std::chrono::milliseconds(2);
    std::string error;
    auto writer = TraceWriter::open(options, two_rank_metadata(), strings, &error);
    if (!writer) _exit(3);
    install_signal_flush();
    std::atomic<int64_t> pushed{0};
    std::thread producer([&] {
      for (int64_t i = 1;; ++i) {
        writer->push(cycle(at_us(static_cast<double>(i)), i));
        pushed.store(i);
        if (i % 64 == 0) std::this_thread::yield();
      }
    });
    while (pushed.load() < 20000) std::this_thread::yield();
    raise(SIGTERM);
    for (;;) pause();
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGTERM);

  const json trace = read_trace(path);
  ASSERT_EQ(trace.back().at("name"), "ranktime_run_end");
  EXPECT_EQ(trace.back()["args"]["events_written"], trace.size());
  std::vector<int64_t> cycles;
  for (const json& e : trace) {
    if (e.at("name") == "CYCLE_START") cycles.push_back(e["args"]["cycle"]);
  }
  ASSERT_GE(cycles.size(), 1u);
  for (size_t i = 1; i < cycles.size(); ++i) ASSERT_LT(cycles[i - 1], cycles[i]);
  // Every record up to the last one kept is in the file, unless it was counted as dropped.
  const int64_t holes = cycles.back() - static_cast<int64_t>(cycles.size());
  EXPECT_LE(holes, trace.back()["args"]["events_dropped"].get<int64_t>());
  EXPECT_GE(cycles.back() + trace.back()["args"]["events_dropped"].get<int64_t>(), 20000);
}

TEST(TraceWriterSignals, ChainsToAPreviousHandler) {
  TempDir dir;
  const std::string a = dir.file("a.json"), b = dir.file("b.json");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    struct sigaction action = {};
    action.sa_handler = [](int) { g_previous_handler_ran = 1; };
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, nullptr);
    child_pushes_then_signals(SIGINT, a, b, true);  // exits 0 once both files are complete
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by " << strsignal(WTERMSIG(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  expect_complete_after_signal(a, b);
}

TEST(TraceWriterSignals, ChildForkedAfterInstallDiesBySigtermAndLeavesTheFileAlone) {
  TempDir dir;
  const std::string path = dir.file("t.json");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(60);
    StringTable strings;
    std::string error;
    auto writer = TraceWriter::open(options_for(path), two_rank_metadata(), strings, &error);
    if (!writer) _exit(3);
    install_signal_flush();
    writer->push(cycle(at_us(1), 1));
    const pid_t grandchild = fork();
    if (grandchild == 0) {
      writer.reset();  // its copy of the writer: must neither hang nor touch the file
      raise(SIGTERM);  // the default action again: dies (a stale handler would hang it)
      for (;;) pause();
    }
    int status = 0;
    if (waitpid(grandchild, &status, 0) != grandchild) _exit(5);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGTERM) _exit(6);
    writer->push(cycle(at_us(2), 2));
    writer->close();
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by " << strsignal(WTERMSIG(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  const json trace = read_trace(path);
  ASSERT_EQ(trace.size(), 7u);
  EXPECT_EQ(trace[4]["args"]["cycle"], 1);
  EXPECT_EQ(trace[5]["args"]["cycle"], 2);
  EXPECT_EQ(trace[6]["name"], "ranktime_run_end");
}

TEST(StringTable, InternsDenselyAndKeepsReferences) {
  StringTable strings;
  EXPECT_EQ(strings.size(), 1u);
  EXPECT_EQ(strings.lookup(0), "");
  EXPECT_EQ(strings.intern(""), 0u);
  const uint32_t a = strings.intern("a");
  const std::string& a_ref = strings.lookup(a);
  for (int i = 0; i < 10000; ++i) strings.intern("n" + std::to_string(i));
  EXPECT_EQ(strings.intern("a"), a);
  EXPECT_EQ(a, 1u);
  EXPECT_EQ(a_ref, "a");  // still valid after growth
  EXPECT_EQ(strings.size(), 10002u);
  EXPECT_EQ(strings.lookup(123456), "");  // an id never given out reads as "none"
}

TEST(Phase, EveryPhaseHasItsDocumentedName) {
  EXPECT_STREQ(phase_name(Phase::kAllreduce), "ALLREDUCE");
  EXPECT_STREQ(phase_name(Phase::kNegotiateBarrier), "NEGOTIATE_BARRIER");
  EXPECT_STREQ(phase_name(Phase::kWaitForOtherTensorData), "WAIT_FOR_OTHER_TENSOR_DATA");
  EXPECT_STREQ(phase_name(Phase::kNcclReducescatter), "NCCL_REDUCESCATTER");
  EXPECT_STREQ(phase_name(Phase::kMemcpyOutHostBuffer), "MEMCPY_OUT_HOST_BUFFER");
  std::set<std::string> names;
  for (int i = 0; i < static_cast<int>(Phase::kCount); ++i) {
    names.insert(phase_name(static_cast<Phase>(i)));
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(Phase::kCount));
}

}  // namespace
}  // namespace ranktime::timeline
