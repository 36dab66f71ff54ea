// Waiting for MPI without holding a core (docs/architecture.md, "Waiting without spinning").
// Open MPI's blocking calls poll until they return, so a rank that reaches a collective before a
// peer spins on its core all the while; where ranks share cores (with each other, with their
// training threads, with other programs) that delays the very peer it waits for. The backends'
// collectives wait here instead: each runs through once_all_arrived(), and any request can be
// waited for with wait_for().
#pragma once

#include <mpi.h>

#include <chrono>

namespace ranktime {

// Waits for `request`: MPI_Test without sleeping for `spin` (RANKTIME_SPIN_US), then between
// sleeps that double from 4 us to 200 us (core/backoff.h); the first sleep sets the calling
// thread's timer slack to 1 us, as the background loop does. Returns MPI's error code.
int wait_for(MPI_Request* request, std::chrono::nanoseconds spin);

// Returns once every rank of `comm` has called it: an MPI_Ibarrier, waited for as above. A
// blocking collective called next finds the others there, so it moves data instead of polling
// for late ranks. Every rank of `comm` must call it, in the same order as its collectives.
int wait_for_all_ranks(MPI_Comm comm, std::chrono::nanoseconds spin);

// Runs `call` (blocking MPI calls over `comm`, returning MPI's error code) after
// wait_for_all_ranks(comm, spin). Blocking rather than nonblocking collectives because Open MPI's
// nonblocking allreduce (libnbc) moves large buffers several times slower.
template <typename Call>
int once_all_arrived(MPI_Comm comm, std::chrono::nanoseconds spin, Call call) {
  const int rc = wait_for_all_ranks(comm, spin);
  return rc == MPI_SUCCESS ? call() : rc;
}

}  // namespace ranktime
