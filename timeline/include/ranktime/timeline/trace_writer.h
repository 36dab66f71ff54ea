// TraceWriter: turns Records into a Chrome-trace JSON array on a thread of its own.
// push() never blocks on I/O and never allocates; when the buffer is full, records are dropped
// and counted. The file on disk is a complete JSON array after every flush.
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

namespace ranktime::timeline {

struct TraceWriterOptions {
  std::string path;
  // Records buffered between flushes; beyond it records are dropped and counted.
  size_t capacity_records = size_t{1} << 18;
  // Longest time a pushed record waits before it is on disk (the SIGKILL loss bound).
  std::chrono::milliseconds flush_interval{250};
  // Write a piece whenever a core is idle (a detector thread at SCHED_IDLE priority tells the
  // writer), besides when the buffer is half full or records a flush interval old; and run the
  // writer as SCHED_BATCH, so that its wake-ups never preempt a rank (it keeps its full share of
  // the CPU). False: only the latter writes, at SCHED_OTHER (tests).
  bool use_idle_cores = true;
  // Called once, from the writer thread, on the first I/O error (message names path and errno).
  std::function<void(const std::string&)> on_error;
};

class TraceWriter {
 public:
  // Creates (truncates) the file and writes the run metadata. Returns nullptr and sets *error
  // with a message naming the path and the reason if the file cannot be created.
  static std::unique_ptr<TraceWriter> open(const TraceWriterOptions& options,
                                           const RunMetadata& metadata, const StringTable& strings,
                                           std::string* error);
  ~TraceWriter();  // close()

  // Thread-safe, non-blocking. Returns false when the record was dropped.
  bool push(const Record& record);
  // Pushes n records under one lock; returns how many were dropped.
  size_t push(const Record* records, size_t n);

  // Updates the clock offsets written in the closing metadata.
  void set_clock_offsets(std::vector<double> offsets_us, std::vector<double> uncertainty_us);

  // Writes everything pushed so far to disk before returning (signal path, tests).
  void flush();
  // Drains, writes the closing metadata (events written and dropped, final clock offsets) and
  // the closing bracket, and stops the thread. Idempotent.
  void close();

  uint64_t dropped() const;
  uint64_t events_written() const;  // JSON events written so far
  const std::string& path() const;

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
