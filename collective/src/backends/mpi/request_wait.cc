// Spin, then sleep, between MPI_Test calls (see request_wait.h).
#include "backends/mpi/request_wait.h"

#include <sys/prctl.h>

#include <thread>

#include "core/backoff.h"

namespace ranktime {

int wait_for(MPI_Request* request, std::chrono::nanoseconds spin) {
  Backoff backoff(spin, std::chrono::steady_clock::now());
  for (;;) {
    int done = 0;
    const int rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || done) return rc;
    const auto sleep = backoff.next(std::chrono::steady_clock::now(), Backoff::kBusyCap);
    if (sleep.count() == 0) continue;
    // Short sleeps must be short: Linux's default 50 us timer slack would dominate them (the
    // background loop sets the same; the GPU path waits on threads of its own).
    thread_local const bool precise = prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0) == 0;
    (void)precise;
    std::this_thread::sleep_for(sleep);
  }
}

int wait_for_all_ranks(MPI_Comm comm, std::chrono::nanoseconds spin) {
  MPI_Request request;
  const int rc = MPI_Ibarrier(comm, &request);
  return rc == MPI_SUCCESS ? wait_for(&request, spin) : rc;
}

}  // namespace ranktime
