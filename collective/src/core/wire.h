// Binary encoding of the messages in message.h. Decoding is defensive: a truncated or corrupt
// buffer throws WireError, never reads out of bounds.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/message.h"

namespace ranktime {

class WireError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Longest tensor name the wire format carries (a u16 length prefix).
inline constexpr size_t kMaxNameBytes = 65535;
// Most dimensions a tensor may have.
inline constexpr size_t kMaxDims = 64;
// Longest request argument (a timeline path).
inline constexpr size_t kMaxArgumentBytes = 1 << 20;

void encode(const WorkerMessage& message, std::vector<uint8_t>* out);
WorkerMessage decode_worker_message(const uint8_t* data, size_t size);
// The same into *out, reusing its vectors' memory (rank 0 decodes every message into one).
void decode_worker_message_into(const uint8_t* data, size_t size, WorkerMessage* out);

void encode(const ResponseList& list, std::vector<uint8_t>* out);
ResponseList decode_response_list(const uint8_t* data, size_t size);

}  // namespace ranktime
