// DeflateStream: raw deflate (RFC 1951) through ISA-L's igzip, which compresses trace text about
// four times as fast as zlib's level 1 at the same ratio (docs/benchmarks.md). The gzip trace
// file's parts and the writer's bench use it; gzip's framing and CRC-32s are the file's.
#pragma once

#include <isa-l/igzip_lib.h>

#include <string_view>
#include <vector>

namespace ranktime::timeline {

class DeflateStream {
 public:
  static constexpr int kMinLevel = 1;
  static constexpr int kMaxLevel = ISAL_DEF_MAX_LEVEL;

  // `level` is clamped to kMinLevel..kMaxLevel.
  explicit DeflateStream(int level);
  DeflateStream(const DeflateStream&) = delete;  // ISA-L's state points into its level buffer
  DeflateStream& operator=(const DeflateStream&) = delete;

  // Starts a new stream whose back-references may reach into `dictionary` (its last 32 KiB): the
  // text just before, when this stream's output follows another stream's in one file.
  bool restart(std::string_view dictionary);

  // Compresses `text` onto `out` from `*used` on (growing it as needed; *used becomes the end).
  // Not `last`: ends with a sync flush, so the output is byte-aligned and the stream goes on.
  // `last`: ends the stream with a final block.
  bool compress(std::string_view text, bool last, std::vector<char>* out, size_t* used);

 private:
  isal_zstream stream_;
  std::vector<uint8_t> level_buffer_;
};

// CRC-32 (gzip's, as zlib's crc32) of `text`, continuing `crc`.
uint32_t crc32_of(uint32_t crc, std::string_view text);

}  // namespace ranktime::timeline
