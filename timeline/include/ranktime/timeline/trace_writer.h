// TraceWriter: turns Records into a Chrome-trace JSON array on a thread of its own.
// push() never blocks on I/O and never allocates; when the buffer is full, records are dropped
// and counted. The file on disk is a complete JSON array after every flush, plain or gzip (a
// path ending in ".gz"), and with a size budget recording goes on in numbered files.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ranktime/timeline/record.h"
#include "ranktime/timeline/run_metadata.h"
#include "ranktime/timeline/string_table.h"
#include "ranktime/timeline/trace_paths.h"  // the rotation's file names

namespace ranktime::timeline {

struct TraceWriterOptions {
  std::string path;
  // Records buffered between flushes; beyond it records are dropped and counted.
  size_t capacity_records = size_t{1} << 18;
  // Longest time a pushed record waits before it is on disk (the SIGKILL loss bound).
  std::chrono::milliseconds flush_interval{250};
  // Also write once no record has been pushed for this long: a lone event (a job between steps,
  // a test reading the file) is on disk within about this, while a busy job's records still go
  // in pieces (0: off; it matters only when shorter than flush_interval).
  std::chrono::milliseconds quiet_flush{20};
  // Write a piece whenever a core is idle (a detector thread at SCHED_IDLE priority tells the
  // writer), besides when the buffer is half full or records a flush interval old; and run the
  // writer as SCHED_BATCH, so that its wake-ups never preempt a rank (it keeps its full share of
  // the CPU). False: only the latter writes, at SCHED_OTHER (tests).
  bool use_idle_cores = true;
  // Called once, from the writer thread, on the first I/O error (message names path and errno).
  std::function<void(const std::string&)> on_error;

  // A size budget per file, in bytes on disk (0: none). When a file would pass it, the file is
  // completed (closing metadata and bracket) and recording goes on in the next numbered file,
  // rotated_path(path, 1), (path, 2), ..., each a standalone trace with the run metadata. A file
  // passes the budget by at most the events of one record and the closing metadata.
  uint64_t max_bytes = 0;
  // Keep only the newest this many files of a rotation, deleting older ones as new ones open
  // (0: keep all).
  uint64_t keep_files = 0;
  // The compression level for a path ending in ".gz", ISA-L's igzip levels 1 (the fastest) to 3:
  // level 3 is 2-3 times slower and on the writer's pieces no smaller (trace_writer_bench: 6.5
  // against 6.1 bytes an event, docs/benchmarks.md).
  int gzip_level = 1;
};

class TraceWriter {
 public:
  // Creates (truncates) the file and writes the run metadata. Returns nullptr and sets *error
  // with a message naming the path and the reason if the file cannot be created. The numbered
  // files of an earlier rotation of the same path (path.1.json, path.2.json, ... up to the first
  // missing one) are deleted, so that a set of files is always one run's.
  static std::unique_ptr<TraceWriter> open(const TraceWriterOptions& options,
                                           const RunMetadata& metadata, const StringTable& strings,
                                           std::string* error);
  ~TraceWriter();  // close()

  // Thread-safe, non-blocking. Returns false when the record was dropped.
  bool push(const Record& record);
  // Pushes n records under one lock; returns how many were dropped.
  size_t push(const Record* records, size_t n);

  // Records come from timeline producers (record.h); a step mark of the collective side, for
  // example, is push(step_record(rank, step, begin_ns, end_ns)) once its end is known.

  // Updates the clock offsets written in the closing metadata (and in the run metadata of the
  // files a rotation opens later).
  void set_clock_offsets(std::vector<double> offsets_us, std::vector<double> uncertainty_us);

  // The regions the run's ranks dropped so far (recorded faster than they could be shipped),
  // written in each file's closing metadata as `regions_dropped` when not 0.
  void set_regions_dropped(uint64_t regions);
  // Writes everything pushed so far to disk before returning (signal path, tests).
  void flush();
  // Drains, writes the closing metadata (events written and dropped, final clock offsets) and
  // the closing bracket, and stops the thread. Idempotent.
  void close();

  uint64_t dropped() const;
  uint64_t events_written() const;  // JSON events written so far, in all files of a rotation
  const std::string& path() const;  // the first file's (options.path)
  uint64_t files_opened() const;    // files of the rotation opened so far (1 without a budget)

  struct Impl;

 private:
  explicit TraceWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Flushes and closes every open TraceWriter when the process gets SIGINT or SIGTERM, then lets
// the signal take its course (previous handler, or the default action). Installed once.
// `linger` delays the default action: a process without a writer (a rank other than 0) waits so
// that rank 0, which mpirun signals at the same moment, can close its file before mpirun sees the
// first rank die and SIGKILLs the rest. The longest linger asked for holds.
void install_signal_flush(std::chrono::milliseconds linger = std::chrono::milliseconds(0));

// Runs `callback(signal, fatal)` on the signal watcher thread when SIGINT or SIGTERM arrives
// (after install_signal_flush), before the writers close: e.g. to report what was pending.
// `fatal` says that the signal's default action follows (the process is about to end); it is
// false when a previous handler function (e.g. Python's) decides. Returns an id for
// remove_signal_callback.
int add_signal_callback(std::function<void(int signal, bool fatal)> callback);
void remove_signal_callback(int id);

}  // namespace ranktime::timeline
