// Ending a doomed MPI job: once a runtime has given up because of another rank (a stall shutdown,
// a lost peer, a collective that never returned), no rank may finalise MPI collectively (it would
// wait for that rank for ever). Instead MPI_Abort ends the whole job after a short grace period,
// in which every responsive rank delivers its errors and rank 0 closes its timeline.
#pragma once

#include <chrono>
#include <string>

namespace ranktime {

// The exit status mpirun reports for an aborted job.
constexpr int kAbortExitCode = 13;

// Marks this process's job doomed (the first call wins; later ones do nothing): writes
// "rank R: reason" to `status_file` unless empty or another rank wrote it already, and starts a
// thread that calls MPI_Abort on MPI_COMM_WORLD `grace` from now.
void doom_job(int rank, const std::string& reason, std::chrono::milliseconds grace,
              const std::string& status_file);
bool job_doomed();
// Waits for the abort (the exit path of a doomed process: it must neither finalise MPI nor
// leave before the others got their grace period). Never returns.
[[noreturn]] void await_job_abort();

}  // namespace ranktime
