// Ending a doomed MPI job (see job_abort.h).
#include "backends/mpi/job_abort.h"

#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>

#include "backends/mpi/request_wait.h"
#include "core/log.h"

namespace ranktime {
namespace {

// If MPI_Abort itself hangs (the runtime system lost the stuck rank too), the process still ends.
constexpr std::chrono::seconds kAbortBackstop(10);

// kDoomed: the abort comes at the end of the grace; kEnded: every rank reached its exit first;
// kAborting: the grace ran out.
enum JobState : int { kAlive, kDoomed, kEnded, kAborting };
std::atomic<int> g_state{kAlive};
std::mutex g_doom_mutex;               // makes the first doom_job() the only one
MPI_Comm g_exit_comm = MPI_COMM_NULL;  // written once, before g_state leaves kAlive

void write_status(int rank, const std::string& reason, const std::string& path) {
  if (path.empty()) return;
  // O_EXCL: the first rank to give up states the reason; the others' follow from it.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) return;
  const std::string text = "rank " + std::to_string(rank) + " gave up: " + reason + "\n";
  const ssize_t written = ::write(fd, text.data(), text.size());
  (void)written;  // best effort: the same text is in the log
  ::close(fd);
}

[[noreturn]] void abort_job() {
  std::fflush(nullptr);  // what the program printed reaches mpirun before the kill
  std::thread([] {
    std::this_thread::sleep_for(kAbortBackstop);
    ::_exit(kAbortExitCode);
  }).detach();
  MPI_Abort(MPI_COMM_WORLD, kAbortExitCode);
  ::_exit(kAbortExitCode);
}

}  // namespace

void doom_job(int rank, const std::string& reason, std::chrono::milliseconds grace,
              const std::string& status_file, MPI_Comm exit_comm) {
  {
    std::lock_guard<std::mutex> lock(g_doom_mutex);
    if (g_state.load() != kAlive) return;
    g_exit_comm = exit_comm;
    g_state.store(kDoomed);
  }
  write_status(rank, reason, status_file);
  RANKTIME_LOG(kError, "the job cannot end normally ("
                           << reason << "); aborting it in " << grace.count() << " ms"
                           << (exit_comm == MPI_COMM_NULL ? ""
                                                          : " unless every rank reaches its "
                                                            "exit first"));
  std::thread([grace] {
    std::this_thread::sleep_for(grace);
    int expected = kDoomed;
    if (g_state.compare_exchange_strong(expected, kAborting)) abort_job();
  }).detach();
}

bool job_doomed() { return g_state.load() != kAlive; }

void end_doomed_job() {
  if (g_state.load() == kEnded) return;
  // Waited for without holding a core; if the abort comes first, it ends this wait too.
  int expected = kDoomed;
  if (g_exit_comm != MPI_COMM_NULL && wait_for_all_ranks(g_exit_comm, {}) == MPI_SUCCESS &&
      g_state.compare_exchange_strong(expected, kEnded)) {
    RANKTIME_LOG(kInfo, "every rank reached its exit: the job ends normally");
    return;
  }
  while (true) std::this_thread::sleep_for(std::chrono::seconds(1));  // the abort ends it
}

}  // namespace ranktime
