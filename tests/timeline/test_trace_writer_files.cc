// TraceWriter tests of its files: gzip (complete after every flush and at the close, the same
// events as plain text) and a size budget's rotation (each file standalone and within the
// budget, nothing dropped, the newest N kept). Signals and SIGKILL: test_trace_writer_signals.cc.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "ranktime/timeline/record.h"
#include "ranktime/timeline/string_table.h"
#include "ranktime/timeline/trace_writer.h"
#include "trace_files.h"
#include "trace_test_data.h"

namespace ranktime::timeline::test {
namespace {

uint64_t file_size(const std::string& path) { return std::filesystem::file_size(path); }

std::vector<uint32_t> some_tensors(StringTable* strings, int n) {
  std::vector<uint32_t> tensors;
  for (int i = 0; i < n; ++i)
    tensors.push_back(strings->intern("layer" + std::to_string(i) + ".w"));
  return tensors;
}

// What a reader sums over a set of files: every slice and tick, by where and when it is (the
// names and args that a new file repeats, a batch's sub-phases, and arrows aside).
std::multiset<std::tuple<std::string, int64_t, int64_t, double, double>> slices_of(
    const std::vector<json>& traces) {
  const std::set<std::string> subphases = {"QUEUE", "MEMCPY_IN_FUSION_BUFFER", "MPI_ALLREDUCE",
                                           "MEMCPY_OUT_FUSION_BUFFER"};
  std::multiset<std::tuple<std::string, int64_t, int64_t, double, double>> out;
  for (const json& trace : traces) {
    for (const json& e : trace) {
      if (e["ph"] != "X" || subphases.count(e["name"]) != 0) continue;
      out.emplace(e["name"], e["pid"], e["tid"], e["ts"], e["dur"]);
    }
  }
  return out;
}

TEST(RotatedPath, NumbersGoBeforeTheExtension) {
  EXPECT_EQ(rotated_path("/tmp/t.json", 0), "/tmp/t.json");
  EXPECT_EQ(rotated_path("/tmp/t.json", 1), "/tmp/t.1.json");
  EXPECT_EQ(rotated_path("/tmp/t.json", 12), "/tmp/t.12.json");
  EXPECT_EQ(rotated_path("run/t.json.gz", 3), "run/t.3.json.gz");
  EXPECT_EQ(rotated_path("t.gz", 2), "t.2.gz");
  EXPECT_EQ(rotated_path("dir.v2/trace", 1), "dir.v2/trace.1");
  EXPECT_EQ(rotated_path("dir/.json", 1), "dir/.json.1");
}

TEST(TraceWriterGzip, CompleteAfterEveryFlushAndTheSameEventsAsText) {
  TempDir dir;
  StringTable strings;
  const std::vector<uint32_t> tensors = some_tensors(&strings, 12);
  auto plain = open_or_fail(options_for(dir.file("t.json")), strings);
  auto gzip = open_or_fail(options_for(dir.file("t.json.gz")), strings);
  EXPECT_TRUE(is_gzip_file(dir.file("t.json.gz")));
  EXPECT_EQ(read_trace(dir.file("t.json.gz")).size(), 4u);  // complete from the start
  // A large flush first: pieces of 512 KiB, compressed in parts side by side (helper threads,
  // each part primed with the text before it).
  for (int step = 0; step < 120; ++step) {
    const std::vector<Record> records = training_step(tensors, 3, step, at_us(20000.0 * step));
    plain->push(records.data(), records.size());
    gzip->push(records.data(), records.size());
  }
  gzip->flush();
  EXPECT_GT(file_text(dir.file("t.json.gz")).size(), size_t{1} << 20);
  size_t previous = read_trace(dir.file("t.json.gz")).size();
  for (int step = 120; step < 126; ++step) {
    const std::vector<Record> records = training_step(tensors, 3, step, at_us(20000.0 * step));
    EXPECT_EQ(plain->push(records.data(), records.size()), 0u);
    EXPECT_EQ(gzip->push(records.data(), records.size()), 0u);
    gzip->flush();
    const json mid_run = read_trace(dir.file("t.json.gz"));  // a complete stream and array
    EXPECT_GT(mid_run.size(), previous);
    EXPECT_EQ(mid_run.size(), gzip->events_written());
    previous = mid_run.size();
  }
  plain->close();
  gzip->close();
  const std::string text = file_text(dir.file("t.json"));
  bool complete = false;
  EXPECT_EQ(file_text(dir.file("t.json.gz"), &complete), text);
  EXPECT_TRUE(complete);
  EXPECT_LT(file_size(dir.file("t.json.gz")) * 5, text.size());
  EXPECT_EQ(read_trace(dir.file("t.json.gz")).back()["name"], "ranktime_run_end");
}

TEST(TraceWriterGzip, EveryLevelReadsBack) {
  TempDir dir;
  StringTable strings;
  const std::vector<uint32_t> tensors = some_tensors(&strings, 8);
  std::vector<uint64_t> sizes;
  for (int level : {1, 2, 3}) {
    TraceWriterOptions options = options_for(dir.file("l" + std::to_string(level) + ".json.gz"));
    options.gzip_level = level;
    auto writer = open_or_fail(options, strings);
    for (int step = 0; step < 20; ++step) {
      const std::vector<Record> records = training_step(tensors, 2, step, at_us(20000.0 * step));
      writer->push(records.data(), records.size());
    }
    writer->close();
    EXPECT_EQ(read_trace(options.path).size(), writer->events_written());
    sizes.push_back(file_size(options.path));
  }
  // Each level is ISA-L's own (level 3 searches harder, and on this little text comes out larger).
  EXPECT_NE(sizes[0], sizes[1]);
  EXPECT_NE(sizes[0], sizes[2]);
}

// With a budget, a file about to pass it is completed and recording goes on in the next one:
// each file is a standalone trace (run metadata, names and args, a batch's sub-phases, both ends
// of its arrows), within the budget but for one record's events, and together they hold what
// one file without a budget holds.
void expect_rotation_keeps_everything(const std::string& name, uint64_t budget) {
  TempDir dir;
  StringTable strings;
  const std::vector<uint32_t> tensors = some_tensors(&strings, 16);
  TraceWriterOptions options = options_for(dir.file(name));
  options.max_bytes = budget;
  auto rotated = open_or_fail(options, strings);
  auto whole = open_or_fail(options_for(dir.file("whole.json")), strings);
  for (int step = 0; step < 40; ++step) {
    const std::vector<Record> records = training_step(tensors, 4, step, at_us(20000.0 * step));
    EXPECT_EQ(rotated->push(records.data(), records.size()), 0u);
    whole->push(records.data(), records.size());
    if (step % 3 == 0) rotated->flush();
  }
  rotated->close();
  whole->close();
  EXPECT_EQ(rotated->dropped(), 0u);
  const uint64_t files = rotated->files_opened();
  ASSERT_GE(files, 4u) << "the budget should have rotated the file several times";

  std::vector<json> traces;
  uint64_t events = 0;
  for (uint64_t index = 0; index < files; ++index) {
    const std::string path = rotated_path(options.path, index);
    SCOPED_TRACE(path);
    const json trace = read_trace(path);
    EXPECT_LE(file_size(path), budget + 4096) << "one record's events at most past the budget";
    // Standalone: run metadata first, the closing metadata last, naming the next file.
    const std::vector<json> opening = two_rank_metadata_events();
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(trace[i], opening[i]);
    EXPECT_EQ(trace[3]["name"], "ranktime_run");
    EXPECT_EQ(trace[3]["args"]["file_index"], index);
    const json& end = trace.back();
    EXPECT_EQ(end["name"], "ranktime_run_end");
    EXPECT_EQ(end["args"]["events_written"], trace.size());
    if (index + 1 < files) {
      EXPECT_EQ(end["args"]["next_file"],
                std::filesystem::path(rotated_path(options.path, index + 1)).filename().string());
    } else {
      EXPECT_FALSE(end["args"].contains("next_file"));
    }
    // Every pid and thread with events is named in this file, every lane's first slice carries
    // its args, every batch its sub-phases, every arrow both ends.
    std::set<int64_t> named_processes;
    std::set<std::pair<int64_t, int64_t>> named_threads, lanes_with_args, batches, queues;
    std::map<int64_t, int> flow_ends;
    for (const json& e : trace) {
      const std::pair<int64_t, int64_t> thread{e["pid"], e["tid"]};
      if (e["ph"] == "M") {
        if (e["name"] == "process_name") named_processes.insert(e["pid"].get<int64_t>());
        if (e["name"] == "thread_name") named_threads.insert(thread);
        continue;
      }
      if (e["ph"] == "s" || e["ph"] == "f") {
        ++flow_ends[e["id"]];
        continue;
      }
      if (e["ph"] != "X") continue;
      EXPECT_TRUE(named_processes.count(e["pid"].get<int64_t>()) != 0) << e.dump();
      EXPECT_TRUE(named_threads.count(thread) != 0) << e.dump();
      if (e["name"] == "ALLREDUCE") {
        if (lanes_with_args.insert(thread).second) {
          EXPECT_TRUE(e.contains("args") && e["args"].contains("shape")) << e.dump();
        }
        batches.emplace(e["tid"], std::llround(e["ts"].get<double>() * 1000));
      }
      if (e["name"] == "QUEUE")
        queues.emplace(e["tid"], std::llround(e["ts"].get<double>() * 1000));
    }
    EXPECT_EQ(batches, queues);
    for (const auto& [id, ends] : flow_ends) EXPECT_EQ(ends, 2) << "arrow " << id;
    events += trace.size();
    traces.push_back(trace);
  }
  EXPECT_EQ(events, rotated->events_written());
  EXPECT_EQ(slices_of(traces), slices_of({read_trace(dir.file("whole.json"))}));
}

TEST(TraceWriterRotation, EachFileStandaloneWithinTheBudgetNothingDropped) {
  expect_rotation_keeps_everything("t.json", 64 << 10);
}

TEST(TraceWriterRotation, GzipFilesWithinTheBudget) {
  expect_rotation_keeps_everything("t.json.gz", 8 << 10);
}

TEST(TraceWriterRotation, KeepsTheNewestFiles) {
  TempDir dir;
  StringTable strings;
  const std::vector<uint32_t> tensors = some_tensors(&strings, 16);
  TraceWriterOptions options = options_for(dir.file("t.json"));
  options.max_bytes = 32 << 10;
  options.keep_files = 3;
  auto writer = open_or_fail(options, strings);
  for (int step = 0; step < 30; ++step) {
    const std::vector<Record> records = training_step(tensors, 2, step, at_us(20000.0 * step));
    writer->push(records.data(), records.size());
    writer->flush();
  }
  writer->close();
  const uint64_t files = writer->files_opened();
  ASSERT_GT(files, 5u);
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    left.push_back(entry.path().filename().string());
  std::sort(left.begin(), left.end());
  std::vector<std::string> expected;
  for (uint64_t index = files - 3; index < files; ++index) {
    expected.push_back(
        std::filesystem::path(rotated_path(options.path, index)).filename().string());
  }
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(left, expected);
  for (const std::string& name : left) EXPECT_NO_THROW(read_trace(dir.file(name))) << name;
}

// A new run's set of files is its own: the numbered files an earlier rotation left go when the
// first file opens (up to the first number missing).
TEST(TraceWriterRotation, OpenDeletesAnEarlierRotation) {
  TempDir dir;
  StringTable strings;
  for (const char* name : {"t.1.json", "t.2.json", "t.4.json", "u.1.json"})
    std::ofstream(dir.file(name)) << "[]";
  auto writer = open_or_fail(options_for(dir.file("t.json")), strings);
  writer->close();
  std::set<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    left.insert(entry.path().filename().string());
  EXPECT_EQ(left, (std::set<std::string>{"t.json", "t.4.json", "u.1.json"}));
}

}  // namespace
}  // namespace ranktime::timeline::test
