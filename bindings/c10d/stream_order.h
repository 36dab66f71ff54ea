// Orders a call on CUDA tensors after the work torch has queued for them. Written against c10's
// device-generic interfaces (no CUDA header), so the backend builds against a CPU-only libtorch;
// only calls whose tensors are on a CUDA device make one, so a CPU-only process never touches it.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace ranktime::c10d {

// torch's current stream on a CUDA device when a call is submitted, and an event recorded on it:
// ranktime's GPU path makes its own stream wait on that event (never the CPU), so the collective
// reads the tensors after every kernel torch queued before the call, including the call's own
// copies into contiguous buffers.
class StreamOrder {
 public:
  // Takes `device`'s current stream (of the calling thread: torch's streams are per thread).
  explicit StreamOrder(c10::Device device);
  ~StreamOrder();
  StreamOrder(const StreamOrder&) = delete;
  StreamOrder& operator=(const StreamOrder&) = delete;

  // The stream the call was submitted on; the backend copies results into the caller's tensors
  // on it, so they are ordered after the caller's earlier work on the tensors.
  c10::Stream stream() const { return stream_; }
  // A cudaEvent_t (as void*) recorded on stream() at the first call, by the submitting thread,
  // after every copy the call queued; later calls return the same event unrecorded. It lives as
  // long as this object, which the operation keeps until the runtime is done with its handles.
  void* ready_event();

 private:
  const c10::impl::DeviceGuardImplInterface* impl_;
  c10::Stream stream_;
  void* event_ = nullptr;
};

}  // namespace ranktime::c10d
