// Ending a doomed MPI job: once a runtime has given up because of another rank (a stall shutdown,
// a lost peer, a collective that never returned), no rank may finalise MPI collectively (it would
// wait for that rank for ever). Instead MPI_Abort ends the whole job after a short grace period,
// in which every responsive rank delivers its errors and rank 0 closes its timeline.
//
// After a stall shutdown the ranks are alive (the stalled one is busy in its own code, and may
// come back): the grace is longer, and a rank that reaches its exit joins a nonblocking barrier on
// a communicator kept for it. When every rank has joined before the abort, the job ends normally
// (MPI_Finalize), each process with its program's own exit status, as a Horovod job does.
#pragma once

#include <mpi.h>

#include <chrono>
#include <string>

namespace ranktime {

// The exit status mpirun reports for an aborted job.
constexpr int kAbortExitCode = 13;

// Marks this process's job doomed (the first call wins; later ones do nothing): writes
// "rank R: reason" to `status_file` unless empty or another rank wrote it already, and starts a
// thread that calls MPI_Abort on MPI_COMM_WORLD `grace` from now, unless every rank reached
// end_doomed_job() first on `exit_comm` (MPI_COMM_NULL: no such ending).
void doom_job(int rank, const std::string& reason, std::chrono::milliseconds grace,
              const std::string& status_file, MPI_Comm exit_comm = MPI_COMM_NULL);
bool job_doomed();
// The exit path of a doomed process. With an exit communicator, joins the other ranks' exits
// and returns once every rank has (the job may then finalise); otherwise, or if the abort comes
// first, waits for the abort (it must neither finalise MPI nor leave before the others got their
// grace period) and never returns. Returns at once when it returned before.
void end_doomed_job();

}  // namespace ranktime
