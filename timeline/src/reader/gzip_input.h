// Reading a trace that may be gzip: a std::streambuf that inflates a file as it is read (zlib;
// concatenated gzip members too), so that the streaming reader sees the text either way. A
// stream cut short (a run killed mid-write, a partial copy) or corrupt ends the text where the
// good data ends, and says so.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <istream>
#include <memory>
#include <streambuf>
#include <string>
#include <vector>

#include "ranktime/timeline/trace_reader.h"  // is_gzip_file()

namespace ranktime::timeline {

class InflatingBuffer : public std::streambuf {
 public:
  // Reads compressed bytes from `source` (which must outlive this buffer).
  explicit InflatingBuffer(std::streambuf* source);
  ~InflatingBuffer() override;
  InflatingBuffer(const InflatingBuffer&) = delete;
  InflatingBuffer& operator=(const InflatingBuffer&) = delete;

  // Why the text ended before a complete gzip stream did ("" when it did not): the input was
  // cut short, or was not valid gzip from some byte on.
  const std::string& problem() const { return problem_; }

 protected:
  int_type underflow() override;

 private:
  std::streambuf* source_;
  z_stream stream_{};
  bool initialized_ = false;
  bool finished_ = false;  // the input ended or failed
  bool between_members_ = false;
  uint64_t compressed_read_ = 0;
  std::vector<char> in_;
  std::vector<char> out_;
  std::string problem_;
};

}  // namespace ranktime::timeline
