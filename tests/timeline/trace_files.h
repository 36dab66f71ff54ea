// What the writer tests need around real files: a temporary directory, a trace file read back,
// and a TraceWriter opened the way the tests want it (explicit flushes, two-rank metadata).
#pragma once

#include <stdlib.h>
#include <zlib.h>

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

// The text of a file, decompressed when it is gzip (zlib's gzread decompresses one stream and
// what follows it; `complete` says whether it ended as a whole gzip stream should).
inline std::string file_text(const std::string& path, bool* complete = nullptr) {
  gzFile in = gzopen(path.c_str(), "rb");
  if (in == nullptr) throw std::runtime_error("cannot read " + path);
  std::string text;
  char buffer[1 << 16];
  int n = 0;
  while ((n = gzread(in, buffer, sizeof(buffer))) > 0) text.append(buffer, static_cast<size_t>(n));
  int error = Z_OK;
  gzerror(in, &error);
  if (complete != nullptr) *complete = n == 0 && error == Z_OK;
  gzclose(in);
  return text;
}

// Parses the whole file (decompressed if gzip); throws (failing the test) unless it is one
// complete JSON document.
inline json read_trace(const std::string& path) {
  bool complete = false;
  const std::string text = file_text(path, &complete);
  if (!complete) throw std::runtime_error(path + " is not a complete gzip stream");
  return json::parse(text);
}

inline bool is_gzip_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[2] = {};
  in.read(magic, 2);
  return in && static_cast<unsigned char>(magic[0]) == 0x1f &&
         static_cast<unsigned char>(magic[1]) == 0x8b;
}

inline TraceWriterOptions options_for(const std::string& path) {
  TraceWriterOptions options;
  options.path = path;
  options.capacity_records = 1 << 14;
  options.flush_interval = std::chrono::hours(1);  // the tests flush explicitly
  options.quiet_flush = {};
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
