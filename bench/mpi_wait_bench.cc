// How a host collective waits for the other ranks, on raw MPI (no runtime): Open MPI's blocking
// MPI_Allreduce; MPI_Iallreduce waited for by wait_for(); and wait_for_all_ranks() then the
// blocking MPI_Allreduce, which is what the MPI backend does (backends/mpi/request_wait.h). Per
// size: the median time of a call when every rank arrives together, as a ratio to the blocking
// call; and, with the last rank --late-us late, the CPU time rank 0's thread spent waiting per call
// (its CPU per call beyond what the same call took when nobody was late). The three run in turn
// inside every repetition, so load on a shared machine hits them alike.
#include <mpi.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "backends/mpi/request_wait.h"
#include "bench_util.h"
#include "core/config.h"

namespace {

using ranktime::bench::median;
using ranktime::bench::now_s;

double thread_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

struct Mode {
  const char* name;
  std::function<void(float* data, int count)> call;
  std::vector<double> together_s;  // per repetition: the slowest rank's time
  double together_cpu_s = 0;       // summed over repetitions: this rank's thread CPU ...
  double late_cpu_s = 0;           // ... and with the last rank late
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"how a collective waits for the other ranks: blocking, nonblocking, arrive first"};
  std::vector<long> sizes{4, 4096, 348160, 4194304};
  int reps = 100;
  double late_us = 2000;
  double spin_us = ranktime::Config{}.spin_us;
  app.add_option("--bytes", sizes, "buffer sizes (float32 elements x 4)")->capture_default_str();
  app.add_option("--reps", reps, "repetitions per size and case")->capture_default_str();
  app.add_option("--late-us", late_us, "how late the last rank is in the second case")
      ->capture_default_str();
  app.add_option("--spin-us", spin_us, "RANKTIME_SPIN_US for the waits")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const auto spin = std::chrono::nanoseconds(static_cast<int64_t>(spin_us * 1000));
  auto check = [&](int rc, const char* what) {
    if (rc == MPI_SUCCESS) return;
    std::fprintf(stderr, "mpi_wait_bench: %s failed (%d)\n", what, rc);
    MPI_Abort(MPI_COMM_WORLD, 1);
  };
  std::vector<Mode> modes = {
      {"blocking",
       [&](float* p, int n) {
         check(MPI_Allreduce(MPI_IN_PLACE, p, n, MPI_FLOAT, MPI_SUM, comm), "MPI_Allreduce");
       }},
      {"nonblocking",
       [&](float* p, int n) {
         MPI_Request request;
         check(MPI_Iallreduce(MPI_IN_PLACE, p, n, MPI_FLOAT, MPI_SUM, comm, &request),
               "MPI_Iallreduce");
         check(ranktime::wait_for(&request, spin), "wait_for");
       }},
      {"arrive+blocking",
       [&](float* p, int n) {
         // Barrier always (direct=false): the crowded-host way, whatever the size.
         check(ranktime::once_all_arrived(
                   comm, ranktime::RankWait(spin, /*direct=*/false), int64_t{n} * 4,
                   [&] { return MPI_Allreduce(MPI_IN_PLACE, p, n, MPI_FLOAT, MPI_SUM, comm); }),
               "once_all_arrived");
       }},
  };
  if (rank == 0) {
    std::printf(
        "ranks=%d, %d repetitions, RANKTIME_SPIN_US=%g; together: median us of the slowest "
        "rank (ratio to blocking); waiting: CPU us per call that rank 0's thread spent "
        "waiting for the last rank, %g us late\n",
        size, reps, spin_us, late_us);
    std::printf("%10s %-30s %-30s %-30s\n", "bytes", "blocking", "nonblocking", "arrive+blocking");
  }
  const bool last = rank == size - 1;
  for (long bytes : sizes) {
    const int count = static_cast<int>(bytes / 4);
    std::vector<float> buffer(count);
    for (Mode& m : modes) {
      m.together_s.clear();
      m.together_cpu_s = m.late_cpu_s = 0;
    }
    for (int i = 0; i < reps; ++i) {
      for (size_t k = 0; k < modes.size(); ++k) {
        Mode& m = modes[(i + k) % modes.size()];
        std::fill(buffer.begin(), buffer.end(), 1.0f);
        MPI_Barrier(comm);
        const double t0 = now_s(), together_cpu0 = thread_cpu_s();
        m.call(buffer.data(), count);
        m.together_cpu_s += thread_cpu_s() - together_cpu0;
        double dt = now_s() - t0, worst = 0;
        MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, comm);
        m.together_s.push_back(worst);

        MPI_Barrier(comm);
        if (last) std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(late_us));
        const double cpu0 = thread_cpu_s();
        m.call(buffer.data(), count);
        m.late_cpu_s += thread_cpu_s() - cpu0;
      }
    }
    if (rank != 0) continue;
    const double base = median(modes[0].together_s);
    std::printf("%10ld", bytes);
    for (const Mode& m : modes) {
      char cell[64];
      std::snprintf(cell, sizeof(cell), "%.2f (%.2fx) waiting %.1f", 1e6 * median(m.together_s),
                    median(m.together_s) / base, 1e6 * (m.late_cpu_s - m.together_cpu_s) / reps);
      std::printf(" %-30s", cell);
    }
    std::printf("\n");
  }
  MPI_Comm_free(&comm);
  MPI_Finalize();
  return 0;
}
