// InflatingBuffer: gzip traces read as text (see gzip_input.h).
#include "gzip_input.h"

#include <fstream>

namespace ranktime::timeline {

namespace {
constexpr size_t kBufferBytes = size_t{1} << 18;
}  // namespace

bool is_gzip_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[2] = {};
  in.read(magic, 2);
  return in.gcount() == 2 && static_cast<unsigned char>(magic[0]) == 0x1f &&
         static_cast<unsigned char>(magic[1]) == 0x8b;
}

InflatingBuffer::InflatingBuffer(std::streambuf* source)
    : source_(source), in_(kBufferBytes), out_(kBufferBytes) {
  // 15 + 16: gzip only, with its header and trailer checked.
  initialized_ = inflateInit2(&stream_, 15 + 16) == Z_OK;
  if (!initialized_) {
    finished_ = true;
    problem_ = "cannot start zlib";
  }
  setg(out_.data(), out_.data(), out_.data());
}

InflatingBuffer::~InflatingBuffer() {
  if (initialized_) inflateEnd(&stream_);
}

InflatingBuffer::int_type InflatingBuffer::underflow() {
  if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
  while (!finished_) {
    if (stream_.avail_in == 0) {
      const std::streamsize n =
          source_->sgetn(in_.data(), static_cast<std::streamsize>(in_.size()));
      if (n <= 0) {
        finished_ = true;
        if (!between_members_) {
          problem_ = "the gzip stream is cut short after " + std::to_string(compressed_read_) +
                     " compressed bytes";
        }
        break;
      }
      compressed_read_ += static_cast<uint64_t>(n);
      stream_.next_in = reinterpret_cast<Bytef*>(in_.data());
      stream_.avail_in = static_cast<uInt>(n);
    }
    if (between_members_) {
      // Another gzip member follows the one that ended (concatenated files are one stream).
      between_members_ = false;
      inflateReset(&stream_);
    }
    stream_.next_out = reinterpret_cast<Bytef*>(out_.data());
    stream_.avail_out = static_cast<uInt>(out_.size());
    const int result = inflate(&stream_, Z_NO_FLUSH);
    const size_t produced = out_.size() - stream_.avail_out;
    if (result == Z_STREAM_END) {
      between_members_ = true;
    } else if (result != Z_OK && result != Z_BUF_ERROR) {
      finished_ = true;
      const uint64_t at = compressed_read_ - stream_.avail_in;
      problem_ = "the gzip data is corrupt at compressed byte " + std::to_string(at) +
                 (stream_.msg != nullptr ? std::string(" (") + stream_.msg + ")" : std::string());
    }
    if (produced > 0) {
      setg(out_.data(), out_.data(), out_.data() + produced);
      return traits_type::to_int_type(*gptr());
    }
  }
  return traits_type::eof();
}

}  // namespace ranktime::timeline
