// TraceWriter tests: the writer's thread and its files. Records are pushed from producer
// threads, written on flush, on a timer, on idle cores or when the buffer fills, dropped when it
// is full; the files are read back with nlohmann_json. What each record turns into is tested on
// the formatter alone (test_event_formatter.cc, test_event_text.cc); signals in
// test_trace_writer_signals.cc.
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
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
#include "trace_files.h"
#include "trace_nesting.h"
#include "trace_test_data.h"

namespace ranktime::timeline::test {
namespace {

TEST(TraceWriter, OpenWritesRunMetadataAndCloseWritesRunEnd) {
  TempDir dir;
  StringTable strings;
  RunMetadata metadata = two_rank_metadata();
  auto writer = open_or_fail(options_for(dir.file("t.json")), strings, metadata);

  // The header is on disk as soon as open() returns.
  const json opened = read_trace(dir.file("t.json"));
  const std::vector<json> expected = two_rank_metadata_events();
  ASSERT_EQ(opened.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(opened[i], expected[i]) << i;
  EXPECT_EQ(writer->events_written(), 4u);

  writer->close();
  const json closed = read_trace(dir.file("t.json"));
  ASSERT_EQ(closed.size(), 5u);
  EXPECT_EQ(closed.back(), two_rank_run_end_event());
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

TEST(TraceWriter, TensorAndLaneMetadataWrittenOncePerFile) {
  TempDir dir;
  StringTable strings;
  const uint32_t a = strings.intern("a.weight");
  const uint32_t b = strings.intern("b.weight");
  auto writer = open_or_fail(options_for(dir.file("t.json")), strings);
  for (int step = 0; step < 3; ++step) {
    const int64_t t0 = at_us(1000 * step);
    for (uint32_t tensor : {a, b}) {
      writer->push(negotiation(tensor, t0, t0 + 10, {{0, t0}}));
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
  second->push(op_end(a, 0, at_us(2)));
  second->close();
  const json second_trace = read_trace(dir.file("second.json"));
  EXPECT_EQ(metadata_named(second_trace, "process_name").size(), 2u);  // ranktime + a.weight
  EXPECT_EQ(metadata_named(second_trace, "thread_name").size(), 3u);   // cycles, negotiate, rank 0
}

// A realistic run: several tensors, four ranks, negotiations then operation slices with their
// sub-phases, the ranks' batches interleaved. Within each (pid, tid) events are in time order,
// sub-phases and ticks follow the slice they belong to, and Perfetto nests them the same way.
TEST(TraceWriter, SlicesNestAndStayInOrderPerThread) {
  TempDir dir;
  StringTable strings;
  std::vector<uint32_t> tensors;
  for (int i = 0; i < 5; ++i) tensors.push_back(strings.intern("tensor." + std::to_string(i)));
  auto writer = open_or_fail(options_for(dir.file("t.json")), strings);
  constexpr int kRanks = 4;
  for (int step = 0; step < 40; ++step) {
    const int64_t t0 = at_us(10000.0 * step);
    for (uint32_t tensor : tensors) {
      std::vector<Record> batch;
      batch.push_back(negotiate_begin(tensor, t0));
      for (int r = 0; r < kRanks; ++r) batch.push_back(tick(tensor, r, t0 + 100 * r, 100 * r));
      batch.push_back(negotiate_end(tensor, t0 + 500, kRanks - 1, 300));
      writer->push(batch.data(), batch.size());
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
      }
    }
    if (step % 7 == 0) writer->flush();
  }
  writer->close();
  const json trace = read_trace(dir.file("t.json"));
  EXPECT_EQ(writer->dropped(), 0u);

  std::map<std::pair<int64_t, int64_t>, double> last_ts;
  size_t slices = 0, ticks = 0, flows = 0;
  const Nesting nesting = format_nesting(trace);
  for (size_t i = 0; i < trace.size(); ++i) {
    const json& e = trace[i];
    if (e["ph"] == "s" || e["ph"] == "f") {
      ++flows;
      continue;
    }
    if (e["ph"] != "X") continue;
    const std::pair<int64_t, int64_t> thread{e["pid"], e["tid"]};
    const double ts = e["ts"];
    if (last_ts.count(thread) != 0) {
      EXPECT_LE(last_ts[thread], ts) << e.dump();
    }
    last_ts[thread] = ts;
    if (e["tid"] == 0 && e["name"] != "NEGOTIATE_ALLREDUCE") {
      ASSERT_GE(nesting.parent[i], 0) << "tick outside its slice: " << e.dump();
      const json& parent = trace[nesting.parent[i]];
      EXPECT_EQ(parent["name"], "NEGOTIATE_ALLREDUCE");
      EXPECT_LE(parent["ts"].get<double>(), ts);
      EXPECT_LT(ts, parent["ts"].get<double>() + parent["dur"].get<double>());
      ++ticks;
    } else {
      ++slices;
    }
  }
  EXPECT_TRUE(nesting_differences(trace).empty())
      << ::testing::PrintToString(nesting_differences(trace));
  EXPECT_EQ(ticks, 40u * 5 * kRanks);
  EXPECT_EQ(slices, 40u * 5 * (1 + kRanks * 5));
  EXPECT_EQ(flows, 40u * 5 * 2);  // one arrow per negotiation, into rank 0's slice
  EXPECT_EQ(last_ts.size(), 5u * (1 + kRanks));
  EXPECT_EQ(writer->events_written(), trace.size());
  EXPECT_EQ(trace.back()["args"]["events_written"], trace.size());
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
  EXPECT_EQ(events_other_than_metadata(trace).size(), 100u * (1 + 2 + 3 + 4 + 5));
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

TEST(TraceWriter, WritesOnceNoRecordCameForTheQuietTime) {
  TempDir dir;
  StringTable strings;
  TraceWriterOptions options = options_for(dir.file("t.json"));  // flush interval: an hour
  options.quiet_flush = std::chrono::milliseconds(20);
  auto writer = open_or_fail(options, strings);
  writer->push(cycle(at_us(1), 1));
  EXPECT_TRUE(file_reaches(dir.file("t.json"), 5));  // well before the hour
  writer->close();
}

TEST(TraceWriter, NoQuietWriteWhenTheFlushIntervalIsShorter) {
  TempDir dir;
  StringTable strings;
  TraceWriterOptions options = options_for(dir.file("t.json"));
  options.quiet_flush = std::chrono::hours(2);  // longer than the interval: the interval holds
  auto writer = open_or_fail(options, strings);
  writer->push(cycle(at_us(1), 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(writer->events_written(), 4u);  // the run metadata only
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

// How many threads have `policy` once `count` of them do, or after `ms` milliseconds: a thread
// sets its own policy when it starts, and a joined one may still be listed in /proc for a moment
// (pthread_join returns when the thread has released its memory, before the kernel has finished
// its exit).
size_t threads_with_policy_after(int policy, size_t count, int ms) {
  for (int waited = 0; waited < ms && threads_with_policy(policy) != count; ++waited) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return threads_with_policy(policy);
}

TEST(TraceWriter, IdleDetectorRunsAtIdlePriorityOnlyWhileOpen) {
  TempDir dir;
  StringTable strings;
  const size_t before = threads_with_policy(SCHED_IDLE);
  auto writer = open_or_fail(options_for(dir.file("t.json")), strings);
  EXPECT_EQ(threads_with_policy_after(SCHED_IDLE, before + 1, 2000), before + 1);
  // close() does not wait for it (on a busy machine it may not run for a long time); it quits
  // the next time it runs.
  writer->close();
  EXPECT_EQ(threads_with_policy_after(SCHED_IDLE, before, 60000), before);
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
    const size_t expected = before + (idle_cores ? 1 : 0);
    EXPECT_EQ(threads_with_policy_after(SCHED_BATCH, expected, 2000), expected);
    writer->close();
    EXPECT_EQ(threads_with_policy_after(SCHED_BATCH, before, 2000), before);
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
    EXPECT_TRUE(file_reaches(path, header + spans));
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
  EXPECT_EQ(events_other_than_metadata(trace).size(), 4u);  // 4 spans
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
    if (e["ph"] == "X") begins[e["pid"]].push_back(e["ts"]);
  }
  ASSERT_EQ(begins.size(), static_cast<size_t>(kThreads));
  for (const auto& [pid, ts] : begins) {
    ASSERT_EQ(ts.size(), static_cast<size_t>(kSpansPerThread));
    for (int i = 0; i < kSpansPerThread; ++i) ASSERT_EQ(ts[i], static_cast<double>(i));
  }
}

}  // namespace
}  // namespace ranktime::timeline::test
