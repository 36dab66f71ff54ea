// A joined rank's part in the other ranks' allreduces (Horovod's join): it has no tensors of its
// own, so it reduces zeros of each tensor's size (Response::tensor_sizes) in their place; an
// average still divides by every rank. Host responses get zeros in host memory here; device
// responses get entries without data, which the device backend zeroes on its own stream
// (TensorEntry::join_zeros), so no host memory ever reaches a device collective.
#pragma once

#include <cstddef>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/message.h"
#include "core/tensor_entry.h"

namespace ranktime {

class JoinZeros {
 public:
  // `found[i]`: this rank's entry for response.names[i], or null where it has none; the nulls are
  // replaced by entries of zeros (response.tensor_sizes[i] elements of response.dtype, on
  // response.device), which stay valid until release(): a device backend still holds them after
  // the call, until its job completes, while later responses get zeros of their own.
  void fill(const Response& response, std::vector<TensorEntry*>* found);
  // Frees an entry fill() made, once it is complete; any other entry is left alone.
  void release(const TensorEntry* entry);
  size_t held() const { return zeros_.size(); }

 private:
  struct Zeros {
    std::unique_ptr<TensorEntry> entry;
    std::vector<std::byte> buffer;  // host responses only
  };
  std::unordered_map<const TensorEntry*, Zeros> zeros_;
};

}  // namespace ranktime
