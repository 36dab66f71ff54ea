// DeflateStream: raw deflate through ISA-L (see deflate_stream.h).
#include "deflate_stream.h"

#include <isa-l/crc.h>

#include <algorithm>

namespace ranktime::timeline {

namespace {

size_t level_buffer_size(int level) {
  switch (level) {
    case 1:
      return ISAL_DEF_LVL1_DEFAULT;
    case 2:
      return ISAL_DEF_LVL2_DEFAULT;
    default:
      return ISAL_DEF_LVL3_DEFAULT;
  }
}

}  // namespace

DeflateStream::DeflateStream(int level) {
  level = std::clamp(level, kMinLevel, kMaxLevel);
  level_buffer_.resize(level_buffer_size(level));
  isal_deflate_init(&stream_);
  stream_.level = static_cast<uint32_t>(level);
  stream_.level_buf = level_buffer_.data();
  stream_.level_buf_size = static_cast<uint32_t>(level_buffer_.size());
  stream_.gzip_flag = IGZIP_DEFLATE;  // raw: the gzip header and trailer are the file's
}

bool DeflateStream::restart(std::string_view dictionary) {
  isal_deflate_reset(&stream_);
  if (dictionary.empty()) return true;
  auto* bytes = reinterpret_cast<uint8_t*>(const_cast<char*>(dictionary.data()));
  return isal_deflate_set_dict(&stream_, bytes, static_cast<uint32_t>(dictionary.size())) ==
         COMP_OK;
}

bool DeflateStream::compress(std::string_view text, bool last, std::vector<char>* out,
                             size_t* used) {
  stream_.next_in = reinterpret_cast<uint8_t*>(const_cast<char*>(text.data()));
  stream_.avail_in = static_cast<uint32_t>(text.size());
  stream_.flush = last ? NO_FLUSH : SYNC_FLUSH;
  stream_.end_of_stream = last ? 1 : 0;
  for (;;) {
    if (out->size() - *used < 64 + text.size() / 2) {
      out->resize(std::max<size_t>(2 * out->size(), *used + 64 + text.size()));
    }
    stream_.next_out = reinterpret_cast<uint8_t*>(out->data() + *used);
    stream_.avail_out = static_cast<uint32_t>(out->size() - *used);
    if (isal_deflate(&stream_) != COMP_OK) return false;
    *used = out->size() - stream_.avail_out;
    // All of the text is in the output (and the stream byte-aligned, or ended) once the stream
    // waits for a new block.
    const int done_state = last ? ZSTATE_END : ZSTATE_NEW_HDR;
    if (stream_.avail_in == 0 && stream_.internal_state.state == done_state) return true;
  }
}

uint32_t crc32_of(uint32_t crc, std::string_view text) {
  return crc32_gzip_refl(crc, reinterpret_cast<const unsigned char*>(text.data()), text.size());
}

}  // namespace ranktime::timeline
