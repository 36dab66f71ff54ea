// TraceFile: plain and gzip trace files, complete after every piece (see trace_file.h).
#include "trace_file.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>
#include <zlib.h>  // crc32_combine

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "deflate_stream.h"

namespace ranktime::timeline {

namespace {

// Text as it is: each piece written over the previous closing bracket, with a new one after it.
class PlainTraceFile : public TraceFile {
 public:
  explicit PlainTraceFile(int fd) : TraceFile(fd) {}

  bool append(std::string_view text, int* error) override {
    if (!write_at(content_, {text, kClosing}, error)) return false;
    content_ += text.size();
    size_ = content_ + kClosing.size();
    return true;
  }
  bool finish(std::string_view text, int* error) override { return append(text, error); }
  uint64_t estimate(uint64_t text_bytes) const override { return text_bytes; }

 private:
  uint64_t content_ = 0;  // bytes before the closing bracket
};

// Deflate's window: what a part is primed with when its stream does not hold the text before it.
constexpr size_t kWindow = size_t{32} << 10;
// Text is compressed in parts side by side only from this size on per part: priming a part's
// stream with the window before it costs 3-18 us on the project's VM, a tenth or less of what
// compressing 128 KiB takes there (150-180 us).
constexpr size_t kMinParallelPart = size_t{128} << 10;

// The gzip header (RFC 1952): deflate, no name, no time, Unix.
constexpr char kGzipHeader[] = {'\x1f', '\x8b', 8, 0, 0, 0, 0, 0, 0, 3};

// One part of a piece of text, compressed as a raw deflate stretch ending with a sync flush (so
// that the next part's stretch can follow it byte-aligned), on a stream of its own.
struct Part {
  explicit Part(int level) : stream(level) {}

  DeflateStream stream;
  std::string_view text;
  std::string_view primer;  // the text before it, when its stream must be primed with it
  bool last = false;        // the file's last part: ends the stream
  std::vector<char> out;
  size_t used = 0;
  uint32_t crc = 0;
  bool ok = true;

  void compress() {
    crc = crc32_of(0, text);
    used = 0;
    ok = (primer.empty() || stream.restart(primer)) && stream.compress(text, last, &out, &used);
  }
};

// gzip, one deflate stream (ISA-L's, see deflate_stream.h). After each piece's sync flush the
// stream is byte-aligned, so a final stored block can follow it: the closing bracket, then the gzip
// trailer (the CRC-32 and length of all the text, the bracket included). The stream goes on
// from the sync flush, and the next piece is written where that block began.
//
// A large piece is compressed in parts side by side on helper threads, as pigz does: each part's
// stream is primed with the 32 KiB of text before it and ends with a sync flush, so the parts
// make one stream, and their CRC-32s combine into the trailer's.
class GzipTraceFile : public TraceFile {
 public:
  GzipTraceFile(int fd, int level)
      : TraceFile(fd),
        level_(level),
        owner_(::getpid()),
        // Helpers on a machine with cores to spare; on one with a single core, none.
        helpers_wanted_(
            std::min<size_t>(3, std::max(1u, std::thread::hardware_concurrency()) - 1)) {}

  ~GzipTraceFile() override {
    if (::getpid() != owner_) {
      // A forked child's copy: its helper threads are its parent's; leave them (and their
      // mutex) alone.
      new std::vector<std::thread>(std::move(helpers_));
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      quit_ = true;
    }
    start_.notify_all();
    for (std::thread& helper : helpers_) helper.join();
  }

  bool append(std::string_view text, int* error) override {
    if (!compress(text, /*last=*/false)) {
      *error = ENOMEM;
      return false;
    }
    // A final stored block: BFINAL=1 BTYPE=00, LEN and NLEN, the bytes; then the trailer.
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
    const uint32_t crc = crc32_of(crc_, kClosing);
    trailer(crc, total_ + n, p);
    return write(std::string_view(closing, sizeof(closing)), error);
  }

  bool finish(std::string_view text, int* error) override {
    // The text and the closing bracket in the stream's final block, then the trailer.
    std::string last(text);
    last.append(kClosing);
    if (!compress(last, /*last=*/true)) {
      *error = ENOMEM;
      return false;
    }
    char end[8];
    trailer(crc_, total_, end);
    return write(std::string_view(end, sizeof(end)), error);
  }

  uint64_t estimate(uint64_t text_bytes) const override {
    // The ratio so far (for a file's first 64 KiB, 1 in 4: JSON text compresses better).
    if (total_ < (uint64_t{1} << 16)) return text_bytes / 4;
    return text_bytes * compressed_ / total_;
  }

 private:
  static void trailer(uint32_t crc, uint64_t length, char* p) {
    for (uint64_t value : {static_cast<uint64_t>(crc), length}) {
      for (int byte = 0; byte < 4; ++byte) *p++ = static_cast<char>((value >> (8 * byte)) & 0xff);
    }
  }

  // Compresses `text` into the parts' outputs, in parts side by side when it is large enough.
  bool compress(std::string_view text, bool last) {
    size_t count = 1;
    if (!last && text.size() >= 2 * kMinParallelPart && helpers_wanted_ > 0) {
      count = std::min(helpers_wanted_ + 1, text.size() / kMinParallelPart);
    }
    while (parts_.size() < count) {
      parts_.push_back(std::make_unique<Part>(level_));
    }
    const size_t size = text.size() / count;
    for (size_t i = 0; i < count; ++i) {
      Part& part = *parts_[i];
      const size_t begin = i * size;
      part.text = text.substr(begin, i + 1 < count ? size : std::string_view::npos);
      part.last = last;
      if (i > 0) {
        part.primer = text.substr(begin - std::min(begin, kWindow), std::min(begin, kWindow));
      } else {
        // Part 0's stream goes on from the previous piece unless that piece was split (its
        // window then ended before the piece's other parts).
        part.primer = window_valid_ ? std::string_view() : std::string_view(tail_);
      }
    }
    run_parts(count);
    for (size_t i = 0; i < count; ++i) {
      if (!parts_[i]->ok) return false;
      crc_ = static_cast<uint32_t>(
          crc32_combine(crc_, parts_[i]->crc, static_cast<z_off_t>(parts_[i]->text.size())));
    }
    total_ += text.size();
    window_valid_ = count == 1;
    pending_parts_ = count;
    // The window the next piece may need.
    if (text.size() >= kWindow) {
      tail_.assign(text.substr(text.size() - kWindow));
    } else {
      tail_.append(text);
      if (tail_.size() > kWindow) tail_.erase(0, tail_.size() - kWindow);
    }
    return true;
  }

  // Writes the header (first time), the parts compress() made, then `closing`, where the
  // previous closing began.
  bool write(std::string_view closing, int* error) {
    std::vector<std::string_view> pieces;
    if (content_ == 0) pieces.emplace_back(kGzipHeader, sizeof(kGzipHeader));
    uint64_t compressed = pieces.empty() ? 0 : sizeof(kGzipHeader);
    for (size_t i = 0; i < pending_parts_; ++i) {
      pieces.emplace_back(parts_[i]->out.data(), parts_[i]->used);
      compressed += parts_[i]->used;
    }
    pending_parts_ = 0;
    pieces.push_back(closing);
    if (!write_at(content_, pieces, error)) return false;
    content_ += compressed;
    compressed_ += compressed;
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

  // Compresses parts 0..count-1: part 0 and any left here, the others on helper threads. Parts
  // are claimed under the mutex (a few per piece, each 128 KiB or more).
  void run_parts(size_t count) {
    if (count == 1) {
      parts_[0]->compress();
      return;
    }
    while (helpers_.size() + 1 < count) {
      // Started by the writer thread, they run at its scheduling policy.
      helpers_.emplace_back([this] { help(); });
    }
    std::unique_lock<std::mutex> lock(mutex_);
    count_ = count;
    next_ = 1;
    remaining_ = count - 1;
    lock.unlock();
    start_.notify_all();
    parts_[0]->compress();
    lock.lock();
    while (next_ < count_) {
      const size_t i = next_++;
      lock.unlock();
      parts_[i]->compress();
      lock.lock();
      --remaining_;
    }
    done_.wait(lock, [&] { return remaining_ == 0; });
  }

  void help() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      start_.wait(lock, [&] { return quit_ || next_ < count_; });
      if (quit_) return;
      const size_t i = next_++;
      lock.unlock();
      parts_[i]->compress();
      lock.lock();
      if (--remaining_ == 0) done_.notify_one();
    }
  }

  const int level_;
  const pid_t owner_;
  const size_t helpers_wanted_;
  std::vector<std::unique_ptr<Part>> parts_;
  bool window_valid_ = true;  // part 0's stream holds the text before the next piece
  std::string tail_;          // the last 32 KiB of text
  size_t pending_parts_ = 0;  // parts compressed, not yet written
  uint32_t crc_ = 0;          // of all the text so far
  uint64_t total_ = 0;        // text bytes so far
  uint64_t compressed_ = 0;   // bytes written before the closing
  uint64_t content_ = 0;      // file offset of the closing block

  std::vector<std::thread> helpers_;
  std::mutex mutex_;
  std::condition_variable start_, done_;
  size_t count_ = 0;      // parts of the piece being compressed
  size_t next_ = 0;       // the next part to claim
  size_t remaining_ = 0;  // parts 1.. not finished
  bool quit_ = false;
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
  return std::make_unique<GzipTraceFile>(fd, gzip_level);
}

bool TraceFile::write_at(uint64_t offset, const std::vector<std::string_view>& texts, int* error) {
  std::vector<iovec> parts;
  for (std::string_view text : texts) {
    if (!text.empty()) parts.push_back({const_cast<char*>(text.data()), text.size()});
  }
  iovec* part = parts.data();
  int count = static_cast<int>(parts.size());
  while (count > 0) {
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
