// The ids rank 0 gives tensor names. They travel with every response (Response::tensor_ids) so
// that every rank's timeline records name a tensor the same way; the timeline's string table
// assigns them (recording/timeline_recorder.h), the coordinator only asks.
#pragma once

#include <cstdint>
#include <string_view>

namespace ranktime {

class TensorIds {
 public:
  virtual ~TensorIds() = default;
  // The id of `name`, the same every time it is asked.
  virtual uint32_t id_of(std::string_view name) = 0;
};

}  // namespace ranktime
