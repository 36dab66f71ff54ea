// Progress lines on stderr while a long trace is read: shown when stderr is a terminal or when
// asked for (--progress), so that a 1 GB file does not look like a hang.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "ranktime/timeline/trace_reader.h"

namespace ranktime::cli {

class ProgressReporter {
 public:
  // `every_bytes`: how often to report. Disabled reporters cost nothing.
  ProgressReporter(std::string command, std::string path, bool enabled, uint64_t every_bytes);
  // Reader options whose progress callback prints here.
  timeline::TraceReadOptions read_options();
  // Ends a line left open by a terminal-style (carriage return) report.
  void done();

 private:
  void report(uint64_t bytes, uint64_t events);

  std::string command_;
  std::string path_;
  bool enabled_;
  bool tty_;
  uint64_t every_bytes_;
  uint64_t file_size_ = 0;
  bool line_open_ = false;
  std::chrono::steady_clock::time_point start_;
};

// "1.5 GiB", "312 MiB", "12 KiB", "80 B".
std::string human_bytes(uint64_t bytes);
// "5.2M", "12.0k", "812".
std::string human_count(double count);

}  // namespace ranktime::cli
