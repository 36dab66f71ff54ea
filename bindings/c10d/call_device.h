// The one device a torch.distributed call runs on, decided from where its tensors are. Pure (no
// tensors, no CUDA), so unit tests call it with at::Device values anywhere.
#pragma once

#include <c10/core/Device.h>

#include <vector>

namespace ranktime::c10d {

// Where one of a call's tensors is, and how a message names it: "input", "output 2".
struct TensorPlace {
  const char* what;  // the tensor's role in the call
  int index;         // its position in a list of such tensors, or -1 for a lone one
  c10::Device device;
};

// The device every one of `tensors` is on (the CPU for none). Throws c10::Error naming `call`
// where a tensor is on neither the CPU nor a CUDA device (the backend runs host memory on MPI and
// CUDA memory on ranktime's GPU path, nothing else), or where two tensors' devices differ: the
// runtime runs an operation on one device, and torch's backends refuse mixed calls too.
c10::Device call_device(const char* call, const std::vector<TensorPlace>& tensors);

}  // namespace ranktime::c10d
