// TraceFile: one trace file on disk, written in pieces, each of which leaves it a complete JSON
// array: plain text (each piece is written over the closing bracket, with a new one after it) or
// gzip (each piece ends with a deflate sync flush, followed by a final block holding the closing
// bracket and the gzip trailer, which the next piece overwrites; large pieces are compressed in
// parts on helper threads). One system call per piece.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ranktime::timeline {

class TraceFile {
 public:
  virtual ~TraceFile();

  // Creates (truncates) `path`, as gzip at level `gzip_level` (DeflateStream's, 1-3) when `gzip`.
  // nullptr with *error (an errno value) when it cannot be created.
  static std::unique_ptr<TraceFile> create(const std::string& path, bool gzip, int gzip_level,
                                           int* error);

  // Appends `text` (the first piece opens the array with '[') and leaves the file complete.
  // False with *error (errno) when the write failed; the file is then left as it is.
  virtual bool append(std::string_view text, int* error) = 0;
  // Appends `text`, the file's last, and completes it for good.
  virtual bool finish(std::string_view text, int* error) = 0;
  // Bytes on disk, the closing included.
  uint64_t size() const { return size_; }
  // About how many bytes on disk `text_bytes` more bytes of text take (a size budget's guess).
  virtual uint64_t estimate(uint64_t text_bytes) const = 0;

  static constexpr std::string_view kClosing = "\n]\n";

 protected:
  explicit TraceFile(int fd) : fd_(fd) {}
  // One pwritev (more only if the kernel writes short) of `texts`, one after the other, at
  // `offset`.
  bool write_at(uint64_t offset, const std::vector<std::string_view>& texts, int* error);

  int fd_;
  uint64_t size_ = 0;
};

}  // namespace ranktime::timeline
