// Every rank agrees on each response's outcome. A rank whose own part of a response failed (a
// fusion copy, a ready-event wait) still takes part in the collective so that the others finish;
// the agreement then fails the response on every rank, so that no rank returns a result it cannot
// vouch for. Used by the host (mpi/) and device (gpu/) backends alike.
#pragma once

#include <mpi.h>

#include <chrono>
#include <string>

#include "backends/mpi/request_wait.h"
#include "core/message.h"
#include "ranktime/ranktime.h"

namespace ranktime {

// Collective over `comm` (every rank, in response order): one allreduce (MAX) of one int, a
// blocking MPI_Allreduce where `wait` calls one that small at once (the ranks have just left the
// same collective), else an MPI_Iallreduce waited for with wait_for(.., wait.spin)
// (request_wait.h). Returns `local` where it failed; else, if
// another rank's part failed, an error naming that rank; else `local` (ok).
Status agree_on_outcome(MPI_Comm comm, int rank, const Status& local, const Response& response,
                        const RankWait& wait);

// Testing aid (RANKTIME_TEST_FAIL_LOCAL="RANK:TENSOR"): an error when this is rank RANK and
// TENSOR is one of `response`'s tensors, as if this rank's copy of it had failed; else ok.
Status injected_local_fault(const std::string& spec, int rank, const Response& response);

}  // namespace ranktime
