// Waiting for MPI without holding a core (docs/architecture.md, "Waiting without spinning").
// Open MPI's blocking calls poll until they return, so a rank that reaches a collective before a
// peer spins on its core all the while; where ranks share cores (with each other, with their
// training threads, with other programs) that delays the very peer it waits for. The backends'
// collectives wait here instead: each runs through once_all_arrived(), and any request can be
// waited for with wait_for().
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>

namespace ranktime {

// Waits for `request`: MPI_Test without sleeping for `spin` (RANKTIME_SPIN_US), then between
// sleeps that double from 4 us to 200 us (core/backoff.h); the first sleep sets the calling
// thread's timer slack to 1 us, as the background loop does. Returns MPI's error code.
int wait_for(MPI_Request* request, std::chrono::nanoseconds spin);

// Returns once every rank of `comm` has called it: an MPI_Ibarrier, waited for as above. A
// blocking collective called next finds the others there, so it moves data instead of polling
// for late ranks. Every rank of `comm` must call it, in the same order as its collectives.
int wait_for_all_ranks(MPI_Comm comm, std::chrono::nanoseconds spin);

// How a backend's collectives wait for the other ranks of their communicator.
struct RankWait {
  // Collectives moving at most this many bytes per rank skip the barrier when `direct_small`:
  // there the barrier's extra exchange costs more than the blocking call's polling saves (on
  // the VM, raw MPI: 1.3-2.9x the blocking call's time at 4 bytes and 4 KiB, 1.12-1.14x at
  // 340 KB; docs/benchmarks.md, bench/mpi_wait_bench).
  static constexpr int64_t kDirectMaxBytes = 64 << 10;

  // Implicit: a bare spin is the barrier-always wait of the GPU path's staging.
  RankWait(std::chrono::nanoseconds spin_ns, bool small_at_once = false)
      : spin(spin_ns), direct_small(small_at_once) {}

  // For collectives whose ranks are known to be there already (a batch's later chunks, once its
  // first has completed): every size calls MPI at once.
  static RankWait arrived() {
    RankWait wait(std::chrono::nanoseconds(0), true);
    wait.direct_max_bytes = INT64_MAX;
    return wait;
  }

  // Whether a collective moving `bytes` per rank calls MPI at once, without waiting first.
  bool direct(int64_t bytes) const { return direct_small && bytes <= direct_max_bytes; }

  std::chrono::nanoseconds spin;  // RANKTIME_SPIN_US, before the backoff's sleeps
  // Whether small collectives (and the outcome agreement) call MPI at once. Every rank of a
  // communicator must hold the same value: MpiWorld sets it where no rank's host has more ranks
  // than cores, where a blocking call's polling takes no core from a peer.
  bool direct_small;
  int64_t direct_max_bytes = kDirectMaxBytes;
};

// Runs `call` (blocking MPI calls over `comm` moving `bytes` per rank, returning MPI's error
// code): at once when the wait allows it for that size, else after wait_for_all_ranks(comm).
// Blocking rather than nonblocking collectives because Open MPI's nonblocking allreduce (libnbc)
// moves large buffers several times slower.
template <typename Call>
int once_all_arrived(MPI_Comm comm, const RankWait& wait, int64_t bytes, Call call) {
  if (wait.direct(bytes)) return call();
  const int rc = wait_for_all_ranks(comm, wait.spin);
  return rc == MPI_SUCCESS ? call() : rc;
}

}  // namespace ranktime
