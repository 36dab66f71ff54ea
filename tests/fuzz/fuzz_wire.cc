// libFuzzer target: the coordinator's decoders must reject any byte string with WireError, never
// crash or read out of bounds. Valid decodes must survive a re-encode round trip, and their
// response cache ids go to a Coordinator that knows one id: any other is an error, never a crash.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/wire.h"
#include "negotiation/coordinator.h"

namespace {

struct Names final : ranktime::TensorIds {
  uint32_t id_of(std::string_view) override { return 1; }
};

// Rank 0's side of the cache with one tensor cached, fed the message's (id, ready time) pairs.
void feed_cache(const ranktime::WorkerMessage& m) {
  using namespace ranktime;
  constexpr int kRanks = 4;
  Names names;
  Coordinator c(kRanks, &names, 8);
  Request q;
  q.name = "w";
  q.shape = {2};
  for (int r = 0; r < kRanks; ++r) c.add(r, q);
  std::vector<Negotiation> negotiations;
  const uint32_t known = c.take_ready({}, &negotiations).at(0).cache_ids.at(0);
  for (size_t i = 0; i < m.cached_ids.size(); ++i) {
    const std::string error = c.add_cached(static_cast<int>(i % kRanks), m.cached_ids[i],
                                           m.cached_ready_ns[i], m.evictions_seen);
    if (error.empty() != (m.cached_ids[i] == known)) __builtin_trap();
  }
  for (const Response& s : c.take_ready({}, &negotiations)) {
    if (s.names.size() != 1 || s.names[0] != "w") __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ranktime;
  std::vector<uint8_t> again;
  try {
    WorkerMessage m = decode_worker_message(data, size);
    encode(m, &again);
    decode_worker_message(again.data(), again.size());
    feed_cache(m);
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
