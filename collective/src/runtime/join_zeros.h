// A joined rank's part in the other ranks' allreduces (Horovod's join): it has no tensors of its
// own, so it reduces zeros of each tensor's size (Response::tensor_sizes) in their place; an
// average still divides by every rank. Host responses get zeros in host memory here; device
// responses get entries without data, which the device backend zeroes on its own stream
// (TensorEntry::join_zeros), so no host memory ever reaches a device collective.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/message.h"
#include "core/tensor_entry.h"

namespace ranktime {

class JoinZeros {
 public:
  // `found[i]`: this rank's entry for response.names[i], or null where it has none; the nulls are
  // replaced by entries of zeros (response.tensor_sizes[i] elements of response.dtype, on
  // response.device), which stay valid until the next call.
  void fill(const Response& response, std::vector<TensorEntry*>* found);

 private:
  std::vector<std::unique_ptr<TensorEntry>> zeros_;
  std::vector<std::vector<std::byte>> buffers_;
};

}  // namespace ranktime
