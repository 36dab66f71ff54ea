// Ending a doomed MPI job (see job_abort.h).
#include "backends/mpi/job_abort.h"

#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "core/log.h"

namespace ranktime {
namespace {

// If MPI_Abort itself hangs (the runtime system lost the stuck rank too), the process still ends.
constexpr std::chrono::seconds kAbortBackstop(10);

std::atomic<bool> g_doomed{false};

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
              const std::string& status_file) {
  if (g_doomed.exchange(true)) return;
  write_status(rank, reason, status_file);
  RANKTIME_LOG(kError, "the job cannot end normally (" << reason << "); aborting it in "
                                                       << grace.count() << " ms");
  std::thread([grace] {
    std::this_thread::sleep_for(grace);
    abort_job();
  }).detach();
}

bool job_doomed() { return g_doomed; }

void await_job_abort() {
  while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
}

}  // namespace ranktime
