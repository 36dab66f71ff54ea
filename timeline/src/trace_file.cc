// TraceFile: plain and gzip trace files, complete after every piece (see trace_file.h).
#include "trace_file.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace ranktime::timeline {

namespace {

// Text as it is: each piece written over the previous closing bracket, with a new one after it.
class PlainTraceFile : public TraceFile {
 public:
  explicit PlainTraceFile(int fd) : TraceFile(fd) {}

  bool append(std::string_view text, int* error) override {
    if (!write_at(content_, text, kClosing, error)) return false;
    content_ += text.size();
    size_ = content_ + kClosing.size();
    return true;
  }
  bool finish(std::string_view text, int* error) override { return append(text, error); }
  uint64_t estimate(uint64_t text_bytes) const override { return text_bytes; }

 private:
  uint64_t content_ = 0;  // bytes before the closing bracket
};

// gzip through zlib. After each piece's sync flush the stream is byte-aligned, so a final stored
// block can follow it: the closing bracket, then the gzip trailer (the CRC-32 and length of all
// the text, the bracket included). The stream itself goes on from the sync flush, and the next
// piece is written where that block began.
class GzipTraceFile : public TraceFile {
 public:
  explicit GzipTraceFile(int fd) : TraceFile(fd) {}
  ~GzipTraceFile() override {
    if (initialized_) deflateEnd(&stream_);
  }

  bool init(int level) {
    initialized_ =
        deflateInit2(&stream_, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK;
    return initialized_;
  }

  bool append(std::string_view text, int* error) override {
    if (!compress(text, Z_SYNC_FLUSH)) {
      *error = ENOMEM;
      return false;
    }
    // A final stored block: BFINAL=1 BTYPE=00, LEN and NLEN, the bytes; then the trailer.
    const uint32_t crc = static_cast<uint32_t>(
        crc32(stream_.adler, reinterpret_cast<const Bytef*>(kClosing.data()), kClosing.size()));
    const auto length = static_cast<uint32_t>(stream_.total_in + kClosing.size());
    const auto n = static_cast<uint16_t>(kClosing.size());
    char closing[5 + kClosing.size() + 8];
    char* p = closing;
    *p++ = 1;
    *p++ = static_cast<char>(n & 0xff);
    *p++ = static_cast<char>(n >> 8);
    *p++ = static_cast<char>(~n & 0xff);
    *p++ = static_cast<char>((~n >> 8) & 0xff);
    std::memcpy(p, kClosing.data(), kClosing.size());
    p += kClosing.size();
    for (uint32_t value : {crc, length}) {
      for (int byte = 0; byte < 4; ++byte) *p++ = static_cast<char>((value >> (8 * byte)) & 0xff);
    }
    return write(std::string_view(closing, sizeof(closing)), error);
  }

  bool finish(std::string_view text, int* error) override {
    if (!compress(text, Z_NO_FLUSH) || !compress(kClosing, Z_FINISH)) {
      *error = ENOMEM;
      return false;
    }
    return write({}, error);
  }

  uint64_t estimate(uint64_t text_bytes) const override {
    // The ratio so far (gzip's first pieces: assume 1 in 4, JSON text compresses better).
    if (stream_.total_in < (uint64_t{1} << 16)) return text_bytes / 4;
    return text_bytes * stream_.total_out / stream_.total_in;
  }

 private:
  // Deflates `text` with `flush` into out_ (from its start).
  bool compress(std::string_view text, int flush) {
    stream_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
    stream_.avail_in = static_cast<uInt>(text.size());
    for (;;) {
      if (out_.size() - out_used_ < 64 + text.size() / 2) {
        out_.resize(std::max<size_t>(2 * out_.size(), out_used_ + 64 + text.size()));
      }
      stream_.next_out = reinterpret_cast<Bytef*>(out_.data() + out_used_);
      stream_.avail_out = static_cast<uInt>(out_.size() - out_used_);
      const int result = deflate(&stream_, flush);
      out_used_ = out_.size() - stream_.avail_out;
      if (result == Z_STREAM_ERROR) return false;
      if (flush == Z_FINISH ? result == Z_STREAM_END
                            : stream_.avail_in == 0 && stream_.avail_out != 0) {
        return true;
      }
    }
  }

  // Writes what compress() made, then `closing`, where the previous closing began.
  bool write(std::string_view closing, int* error) {
    const std::string_view compressed(out_.data(), out_used_);
    out_used_ = 0;
    if (!write_at(content_, compressed, closing, error)) return false;
    content_ += compressed.size();
    const uint64_t end = content_ + closing.size();
    // The new end is never before the old one (the same closing after more data), but a file
    // must not keep stale bytes after its trailer.
    if (end < size_ && ::ftruncate(fd_, static_cast<off_t>(end)) != 0) {
      *error = errno;
      return false;
    }
    size_ = end;
    return true;
  }

  z_stream stream_{};
  bool initialized_ = false;
  std::vector<char> out_ = std::vector<char>(size_t{1} << 16);
  size_t out_used_ = 0;
  uint64_t content_ = 0;  // bytes of the stream before the closing block
};

}  // namespace

TraceFile::~TraceFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::unique_ptr<TraceFile> TraceFile::create(const std::string& path, bool gzip, int gzip_level,
                                             int* error) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = errno;
    return nullptr;
  }
  if (!gzip) return std::make_unique<PlainTraceFile>(fd);
  auto file = std::make_unique<GzipTraceFile>(fd);
  if (!file->init(gzip_level)) {
    *error = ENOMEM;
    return nullptr;
  }
  return file;
}

bool TraceFile::write_at(uint64_t offset, std::string_view a, std::string_view b, int* error) {
  iovec parts[2] = {{const_cast<char*>(a.data()), a.size()},
                    {const_cast<char*>(b.data()), b.size()}};
  iovec* part = parts;
  int count = 2;
  while (count > 0) {
    if (part->iov_len == 0) {
      ++part;
      --count;
      continue;
    }
    const ssize_t written = ::pwritev(fd_, part, count, static_cast<off_t>(offset));
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) {
      *error = written < 0 ? errno : EIO;
      return false;
    }
    offset += static_cast<uint64_t>(written);
    auto left = static_cast<size_t>(written);
    while (count > 0 && left >= part->iov_len) {
      left -= part->iov_len;
      ++part;
      --count;
    }
    if (count > 0) {
      part->iov_base = static_cast<char*>(part->iov_base) + left;
      part->iov_len -= left;
    }
  }
  return true;
}

}  // namespace ranktime::timeline
