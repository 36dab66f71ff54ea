// libFuzzer target: the coordinator's decoders must reject any byte string with WireError, never
// crash or read out of bounds. Valid decodes must survive a re-encode round trip.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ranktime;
  std::vector<uint8_t> again;
  try {
    WorkerMessage m = decode_worker_message(data, size);
    encode(m, &again);
    decode_worker_message(again.data(), again.size());
  } catch (const WireError&) {
  }
  try {
    ResponseList l = decode_response_list(data, size);
    encode(l, &again);
    decode_response_list(again.data(), again.size());
  } catch (const WireError&) {
  }
  return 0;
}
