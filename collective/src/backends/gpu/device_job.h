// The state of one job on a device set, shared by the files that make up DeviceSet: set-up and
// threads (device_set.cc), the steps a job launches (device_steps.cc), and the mapping of its
// CUDA event times onto the host clock (device_anchor.cc). Internal to backends/gpu/.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "backends/gpu/device_fusion.h"
#include "backends/gpu/device_set.h"
#include "backends/gpu/event_clock.h"
#include "backends/gpu/gpu_phases.h"

namespace ranktime::gpu {

// Up to this many distinct ready events per response get their own timing event, so that each
// tensor's lane shows when its own data was ready. Beyond it (a framework that records one event
// per gradient), one event after all the waits: an event record costs about a microsecond of the
// background thread's time, per event, timeline on or off.
inline constexpr size_t kMaxTimedReadyEvents = 8;

struct DeviceSet::AnchorEvent {
  cudaEvent_t event = nullptr;
  Anchor anchor;
  ~AnchorEvent() {
    if (event != nullptr) cudaEventDestroy(event);
  }
};

struct DeviceSet::Job {
  Response response;
  std::vector<TensorEntry*> entries;
  int64_t arrival_ns = 0;
  int64_t enqueue_ns = 0;  // no GPU mark of this job can precede it
  std::vector<Step> steps;
  bool root = false;              // broadcast root
  bool use_fusion = false;        // the working buffer is the device fusion buffer
  bool skip_user_memory = false;  // this rank cannot use its tensors: take part with scratch
  bool zeros = false;  // some entries are a joined rank's zeros: scratch, zeroed on the stream
  std::vector<size_t> sizes;  // per entry, bytes
  FusionLayout layout;        // use_fusion
  size_t work_bytes = 0;      // what the collective covers: identical on every rank
  GatherLayout gather;        // allgather; alltoall: where each rank's rows land
  GatherLayout sends;         // alltoall: this rank's rows for each rank
  ScatterLayout scatter;      // reducescatter
  // Allgather, reducescatter and alltoall return their result in the handle's host output: in
  // the NCCL modes it is copied from pinned memory at completion (the staged modes' host
  // collective writes the handle itself).
  size_t result_bytes = 0;
  std::vector<int64_t> result_shape;
  std::vector<int32_t> received_splits;  // alltoall
  std::shared_ptr<AnchorEvent> anchor;

  std::vector<cudaEvent_t> ready_events;  // distinct producer events
  std::vector<int> entry_event;           // per entry: index into ready_events, or -1
  std::vector<cudaEvent_t> captured;      // worker modes: our copies (one each, or one for all)
  std::vector<int> ready_marks;           // direct waits: per ready event, the mark after it

  std::vector<Mark> marks;
  std::vector<JobTimes::Span> spans;
  int data_ready_mark = -1;
  void* work = nullptr;  // device working buffer
  // Allgather, reducescatter, alltoall: the device result (freed in stream order).
  void* output = nullptr;
  void* host = nullptr;  // pinned staging buffer, or a device result on its way to the host
  Status status;
  bool launched = false;  // every stream and host step is issued (guarded by mutex_)
  cudaEvent_t last_event = nullptr;
};

}  // namespace ranktime::gpu
