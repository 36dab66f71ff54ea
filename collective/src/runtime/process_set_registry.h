// The process sets as one rank's runtime holds them: the table (negotiation/process_sets.h) that
// user threads read (submission checks, the API's queries) and the background thread changes as
// add and remove responses execute, and, on a set's members, the backend that runs its tensors
// over the set's own communicator. Every rank executes every change in the same order, so every
// rank's table is the same after each; rank 0's Coordinator reads rank 0's.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/message.h"
#include "negotiation/process_sets.h"
#include "runtime/world.h"

namespace ranktime {

class ProcessSetRegistry {
 public:
  ProcessSetRegistry(int rank, int size);

  // User threads. What submitting `op` over set `id` means on this rank: `label`, what the set's
  // tensor names end with (set_tensor_name; "" for set 0); `size`, how many ranks share the
  // operation (a reducescatter's or alltoall's split count); and why this rank cannot submit it
  // ("" when it can): `local`, a refusal that never leaves the rank (no such set, not a member);
  // `request`, an error that fails the tensor on every member (a root outside the set). Device
  // tensors are checked where every tensor is (World::check_device), not here.
  struct Submission {
    std::string label;
    int size = 1;
    std::string local, request;
  };
  Submission check(int32_t id, OpType op, int root) const;
  std::vector<int32_t> ids() const;
  // The set's ranks into *ranks; false when there is no such set.
  bool ranks(int32_t id, std::vector<int>* ranks) const;

  // Background thread (which alone changes the table, so reads it without the lock).
  const ProcessSets& table() const { return sets_; }
  // Whether this rank executes responses of set `id`.
  bool member(int32_t id) const;
  // The backend of set `id` on this rank (a member; not set 0, which has the runtime's own) for
  // tensors on `device`: the set's device backend for a device, its host backend for kCpuDevice.
  // Null where there is none (not a member; no device backend on this rank).
  Backend* backend(int32_t id, int device) const;
  // Every set's device backend, in id order (their completions, drains and pending work).
  void each_device_backend(const std::function<void(Backend&)>& f) const;
  // How many sets have a device backend on this rank (the loop asks every cycle: no iteration).
  size_t device_backends() const { return device_backends_; }
  // Applies an executed add (`response.root` is the id) or remove: collective over every rank
  // (the world makes a set's communicator from its job's). `wake`: what a new device backend
  // calls when it has completions. A removed set's device backend must have been drained and its
  // completions taken: removal frees its communicator. "" or what went wrong.
  std::string apply(const Response& response, World& world, const Clock* clock,
                    const Config& config, const std::function<void()>& wake);

 private:
  int rank_;
  mutable std::mutex mutex_;  // user threads' reads against the background thread's changes
  ProcessSets sets_;
  std::map<int32_t, SetBackends> backends_;  // background thread only
  size_t device_backends_ = 0;               // background thread only
};

}  // namespace ranktime
