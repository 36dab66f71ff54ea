// What one rank's Runtime runs over: where the rank sits, the control channel to the other ranks,
// and the backends that move tensor data. MPI processes in production
// (backends/mpi/mpi_world.h); threads of one process in the in-process protocol tests.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/clock.h"
#include "core/config.h"
#include "runtime/control_channel.h"

namespace ranktime {

struct Placement {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;  // among the ranks on this host
  // Among the ranks with this local rank, one per host (Horovod's cross_rank and cross_size):
  // with the same number of ranks on every host, the host's index and the number of hosts.
  int cross_rank = 0, cross_size = 1;
  std::string hostname;
  int64_t pid = 0;
};

// A process set's backends on one of its members, both over the set's own communicator: `host`
// for host memory, which owns the communicator, and `device` for device memory (null where this
// rank has no device backend). Declared in this order so that `device` is destroyed first.
struct SetBackends {
  std::unique_ptr<Backend> host;
  std::unique_ptr<Backend> device;
};

class World {
 public:
  virtual ~World() = default;

  virtual Placement placement() const = 0;
  virtual ControlChannel& control() = 0;
  // Host-memory collectives; `clock` outlives the backend.
  virtual std::unique_ptr<Backend> host_backend(const Clock* clock, const Config& config) = 0;
  // Device-memory collectives, or null where there are none (no GPU here, a CPU-only build).
  // wake() is called from the backend's threads when completions are waiting.
  virtual std::unique_ptr<Backend> device_backend(const Clock* clock, const Config& config,
                                                  std::function<void()> wake) = 0;
  // The backends of a process set of these (ascending, global) ranks, over a communicator of
  // their own; none on the ranks outside it. `wake` as for device_backend(). Collective: every
  // rank calls it for every set added, in the same order.
  virtual SetBackends process_set_backends(int32_t id, const std::vector<int>& ranks,
                                           const Clock* clock, const Config& config,
                                           std::function<void()> wake) = 0;
  // "" when tensors on `device` can run here, else why not (fails the tensor on every rank).
  virtual std::string check_device(int device) const = 0;
  // One runtime per process reacts to SIGINT/SIGTERM (reports what was pending, fails it).
  virtual bool handles_signals() const = 0;
  // Whether some host of the job runs more ranks than it has processors (alike on every rank):
  // there a thread that polls takes the core a late peer needs.
  virtual bool crowded() const { return false; }
  // The runtime gave up because of another rank (a stall shutdown, a lost peer, a collective that
  // never returned): the job cannot end by a collective finalisation unless every rank reaches
  // its exit. An MPI job is aborted after a grace period, plus `exit_wait` for every rank to reach
  // its exit (a stall: the ranks are alive), in which case it ends normally
  // (backends/mpi/job_abort.h); called once, from any thread.
  virtual void doom(const std::string& /*reason*/, std::chrono::milliseconds /*exit_wait*/) {}
};

}  // namespace ranktime
