// What the writer tests need around real files: a temporary directory, a trace file read back,
// and a TraceWriter opened the way the tests want it (explicit flushes, two-rank metadata).
#pragma once

#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>

#include <nlohmann/json.hpp>

#include "ranktime/timeline/string_table.h"
#include "ranktime/timeline/trace_writer.h"
#include "trace_test_data.h"

namespace ranktime::timeline::test {

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
inline json read_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return json::parse(in);
}

inline TraceWriterOptions options_for(const std::string& path) {
  TraceWriterOptions options;
  options.path = path;
  options.capacity_records = 1 << 14;
  options.flush_interval = std::chrono::hours(1);  // the tests flush explicitly
  return options;
}

inline std::unique_ptr<TraceWriter> open_or_fail(
    const TraceWriterOptions& options, const StringTable& strings,
    const RunMetadata& metadata = two_rank_metadata()) {
  std::string error;
  auto writer = TraceWriter::open(options, metadata, strings, &error);
  if (!writer) throw std::runtime_error("open failed: " + error);
  return writer;
}

}  // namespace ranktime::timeline::test
